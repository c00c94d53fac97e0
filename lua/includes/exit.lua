--- Leaving a state (docs/internals-scripts.md "Exit paths"): the bookkeeping every script does when a task
--- leaves active or ends for good, in one place, so no path can skip a duty another path does. The
--- script moves the task itself (its stored value, its list or zset: the first write of a script must
--- be a removal on a full Redis, so only the script knows the order); then it calls task_exit, which
--- does what the way of leaving (``how``) owes, in this order:
---   lock      its uniqueness lock released, if it still holds it          (final ends)
---   progress  its progress entry cleared                                   (left active)
---   event     its lifecycle event written ('lease_expired' first when the recoverer ends it)
---   children  the tasks waiting on it (after=) told its end through the queue's outbox; a task
---             deleted takes its own entries (children, and deps: its record as a child) with it
---   key       its key (key=) handed to the key's next task, if it holds it (final ends)
---   process   a process input's process marked in error                   (failures)
---   tenant    a tenant task's slot (its tenant's concurrency) freed, a held tenant back in the
---             ring and a worker woken (left active; includes/priority tenant_left)
---   wake      a slot freed under a concurrency limit wakes a held-back worker (left active)
---   blob      an offloaded payload's blob name recorded for deletion (x.blobs; forget: includes/offload)
---
--- exit_row(how): what each way of leaving owes, the table of duties (final = it ends for good: its
--- lock and key go; tell = the outcome its children are told; forget = the task is deleted: its
--- children and deps entries go too; event = the event's name; process = a process input's
--- process is marked in error). A chain of comparisons, not a table of tables: the tables would be
--- built again on every call of every script that includes this (~10 µs measured on a loaded host).
---
--- x: the keys and values a script's exits share, built once per script (a field left nil skips
--- the duties that need it): t, events, conf (or cap), progress, lease (set when the tasks leave
--- active: the wake and tenant duties; ta is then required), children, outbox, deps, keyheld,
--- blocked, pending, prio, tq, tr, tn, ta (the pending keys, includes/priority), wake, and for
--- the scripts that end process inputs proc, procs, now and mark_process = proc_mark_error
--- (includes/process: passed in, so the scripts whose tasks are never inputs do not define it).
--- flows = false: the caller knows the queue has no workflows (done checks once per batch): the
--- children duty is skipped. cap (the events cap) and unlimited = true (no 'concurrency' in conf:
--- the wake duty has nothing to do) when the caller read its conf itself (one HMGET, done).
--- batch = {}: the caller ends a batch of tasks and calls exit_flush(x) at its end (includes/exit_batch).
---
--- task_exit(x, e): one task leaves, ``e`` says which and how: id, how (a row of exit_row), msg (the
--- message, for the event's type), and where they apply: lock (its lock key), progressed (false =
--- the run wrote no progress: nothing to clear), result (msgpack, for its children: completed),
--- key and keylist (its key, '' = none, and the key's list), pid and kind (a process input), mark
--- (the process's error; default error), attempt, error, due, recovered (the event's fields), more
--- (further field/value pairs for the event), mtype (the message's type, when the caller read it in
--- place: msg is then not needed), tenant (the task's tenant, for the event, when msg is not given; else
--- read from msg: the event's 'tenant' field). Returns true when children were told (the caller
--- marks its reply: includes/flow ``told``).
---
--- exit_plain(x, how, ids, mtypes, attempts, n, tenants, known): task_exit for n tasks leaving the same way that
--- hold no lock, wrote no progress, hold no key and are no process input (their event has a type,
--- an attempt and nothing more): the same duties in the same order, without a table and calls
--- per task (each joins the last event group inline; a task that starts a group, or whose id
--- cannot go in an id list, goes through task_exit). Where the tasks may have children to tell
--- (x.flows not false) each goes through task_exit; returns the indexes k of the tasks whose
--- children were told (nil = none). ``known``: ta's answer for ids[1..n] (the caller read it for
--- their tenants: exit_tenant does not read it again), or nil.
--- @include "events"
--- @include "unique"
--- @include "flow"
--- @include "serial"
--- @include "slots"
--- @include "exit_batch"
--- @include "exit_slots"
--- @include "offload"
local function exit_row(how)
  --                                       final  tell  forget  event          process
  if how == 'done' then        return true,  'c',  true,   'completed',   false  -- succeeded, not kept
  elseif how == 'completed' then return true,  'c',  false,  'completed',   false  -- succeeded, kept
  elseif how == 'archived' then  return true,  'x',  false,  'archived',    true
  elseif how == 'cancelled' then return true,  'x',  false,  'cancelled',   true
  elseif how == 'deleted' then   return true,  'd',  true,   'deleted',     false
  elseif how == 'debounced' then return true,  'd',  true,   'debounced',   false  -- replaced by a debounce
  elseif how == 'aggregated' then return true, 'd',  true,   'aggregated',  false  -- turned into one task
  elseif how == 'retry' then     return false, nil,  false,  'retry',       false  -- failed, retries left
  elseif how == 'snoozed' then   return false, nil,  false,  'scheduled',   false  -- RateLimited: nothing counted
  elseif how == 'requeued' then  return false, nil,  false,  nil,           false  -- shutdown: back to pending
  elseif how == 'run_ended' then return false, nil,  false,  nil,           false  -- a targeted task's run (runs)
  end
  error('task_exit: no such way of leaving: ' .. tostring(how))
end
local function task_exit(x, e)
  local final, tell, forget, event, process = exit_row(e.how)
  local id = e.id
  if final and e.lock then
    release_lock(e.lock, id)
  end
  if forget and x.blobs and e.msg then  -- its offloaded payload's blob: deleted by a worker (includes/offload)
    exit_blob(x, e.msg, 1)
  end
  if x.progress and e.progressed ~= false then
    redis.call('HDEL', x.progress, id)
  end
  local mtype = event and exit_cap(x) > 0 and (e.mtype or msg_type(e.msg or ''))
  local tenant = mtype and (e.tenant or (e.msg and msg_tenant(e.msg, 1))) or nil  -- (nil: none)
  if mtype and x.batch then
    if not (e.recovered or e.error or e.due or e.more) and ids_ok(id) then
      exit_gather(x, event, mtype, e.attempt, id, tenant)
      mtype = false  -- (gathered: written by exit_flush)
    else
      exit_flush(x)  -- (the gathered events happened first)
    end
  end
  if mtype then
    if e.recovered then
      emit(x.events, x.cap, 'e', 'lease_expired', 'id', id, 'type', mtype, 'attempt', e.attempt)
    end
    local f = x.fields  -- (one list per script, refilled: a batch allocates nothing per task)
    if not f then
      f = {'e', '', 'id', '', 'type', '', '', '', '', '', '', ''}  -- (sized for the usual fields: no resize)
      x.fields = f
    end
    f[2], f[4], f[6] = event, id, mtype
    local n = 6
    if e.attempt then
      f[n + 1], f[n + 2], n = 'attempt', e.attempt, n + 2
    end
    if e.error then
      f[n + 1], f[n + 2], n = 'error', e.error, n + 2
    end
    if e.due then
      f[n + 1], f[n + 2], n = 'due', e.due, n + 2
    end
    if tenant then
      f[n + 1], f[n + 2], n = 'tenant', tenant, n + 2
    end
    if e.more then
      for _, v in ipairs(e.more) do
        f[n + 1], n = v, n + 1
      end
    end
    emit(x.events, x.cap, unpack(f, 1, n))
  end
  local told_children = false
  if tell and x.children and x.flows ~= false then
    told_children = tell_children(x.children, x.outbox, id, tell, e.result)
    if forget then
      redis.call('HDEL', x.children, id)
      if x.deps then
        rec_forget(x.deps, id)
      end
    end
  end
  if final and e.key and e.key ~= '' and e.keylist then
    local gather = x.batch and exit_cap(x) > 0  -- (the key's next task's 'enqueued' gathered too)
    local nxt, nmsg, ntenant = key_release(x.t, x.keyheld, x.blocked, exit_pk(x), x.wake, x.events,
      gather and 0 or exit_cap(x), e.keylist, e.key, id)
    if gather and nxt then
      if ids_ok(nxt) then
        exit_gather(x, 'enqueued', msg_type(nmsg), nil, nxt, ntenant)
      else
        exit_flush(x)
        emit_task(x.events, x.cap, ntenant, 'e', 'enqueued', 'id', nxt, 'type', msg_type(nmsg))
      end
    end
  end
  if process and e.pid and e.pid ~= '' then
    if not x.mark_process then
      error('task_exit: a process input ends, and x has no mark_process (includes/process proc_mark_error)')
    end
    x.mark_process(x.proc, x.procs, e.pid, id, e.mark or e.error, x.now, e.kind)
  end
  if x.lease then
    exit_tenant(x, {id})
  end
  exit_wake(x)
  return told_children
end
local function exit_plain(x, how, ids, mtypes, attempts, n, tenants, known)
  local _, tell, _, event = exit_row(how)
  local told = nil
  if (tell and x.children and x.flows ~= false) or not x.batch then  -- (children to tell: the general path)
    for k = 1, n do
      if task_exit(x, {how = how, id = ids[k], mtype = mtypes[k], attempt = attempts[k], progressed = false,
                       tenant = tenants and tenants[k] or nil}) then
        told = told or {}
        told[#told + 1] = k
      end
    end
    return told
  end
  if event and exit_cap(x) > 0 then
    local g = x.last
    local spaced = not ids_ok(table.concat(ids, '', 1, n))  -- (ids_ok for all at once: some id has a space?)
    for k = 1, n do
      local id, mtype, attempt, tenant = ids[k], mtypes[k], attempts[k], tenants and tenants[k] or nil
      if g and g.mtype == mtype and g.attempt == attempt and g.event == event and g.tenant == tenant
          and (not spaced or ids_ok(id)) then
        g.n = g.n + 1  -- (exit_gather's work, inline: the task joins the last group)
        g.ids[g.n] = id
      else
        task_exit(x, {how = how, id = id, mtype = mtype, attempt = attempt, progressed = false, tenant = tenant})
        g = x.last
      end
    end
  end
  if x.lease and n > 0 then
    exit_tenant(x, n == #ids and ids or {unpack(ids, 1, n)}, known)
  end
  exit_wake(x)
  return told
end
