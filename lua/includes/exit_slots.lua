--- The duties of tasks leaving active that free a slot (includes/exit: the tenant and wake rows),
--- x being the keys and values a script's exits share (includes/exit).
--- exit_pk(x): the script's pending keys (includes/priority pk), built once from x's names.
--- exit_tenant(x, ids, known): tasks left active: their tenants' slots freed (includes/tenant tenant_left;
--- known: ta's answer for ids, read by the caller, or nil),
--- a held tenant back in the ring and a worker woken (x.wake). x.ta is required: an error otherwise
--- (a tenant slot would leak).
--- exit_wake(x): a slot freed under the queue's concurrency limit wakes a held-back worker (once per
--- script: one token wakes the next; includes/slots slot_freed). Until it has woken one, each exit
--- looks again (the limit read once): a batch whose items leave the lease zset one by one, each
--- before its exit (proc_commit), frees its slots after the first item's exit.
--- @include "signal"
--- @include "priority"
--- @include "slots"
local function exit_pk(x)  -- the script's pending keys (includes/priority), from x's names
  local pk = x.pk
  if not pk then
    pk = {x.pending, x.prio, x.tq, x.tr, x.tn, x.ta}
    x.pk = pk
  end
  return pk
end
local function exit_tenant(x, ids, known)  -- tasks left active: their tenants' slots (includes/priority tenant_left)
  if not x.ta then
    return error('task_exit: tasks leave active and x has no ta (the tenant duty: a tenant slot would leak)')
  end
  if tenant_left(exit_pk(x), ids, known) and x.wake then  -- (one HMGET of ta; no EXISTS: a producer may not run it)
    signal(x.wake)
  end
end
local function exit_wake(x)
  if x.lease and not x.woke and not x.unlimited and x.conf and x.pending and x.wake then
    local limit, woke = slot_freed(x.conf, x.lease, exit_pk(x), x.wake, x.limit)
    x.limit, x.woke = limit, woke or not limit  -- (no limit: nothing to wake for in this script)
  end
end
