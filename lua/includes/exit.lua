--- Leaving a state (docs/architecture.md "Exit paths"): the bookkeeping every script does when a task
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
---   wake      a slot freed under a concurrency limit wakes a held-back worker (left active)
---
--- EXITS: what each way of leaving owes (final = it ends for good; tell = the outcome its children
--- are told; forget = the task is deleted: its children and deps entries go too; event = the
--- event's name; process = a process input's process is marked in error).
---
--- x: the keys and values a script's exits share, built once per script (a field left nil skips
--- the duties that need it): t, events, conf (or cap), progress, lease (set when the tasks leave
--- active: the wake duty), children, outbox, deps, keyheld, blocked, pending, prio, wake, proc,
--- procs, now. task_exit caches in it the events cap, whether the queue has workflows (one
--- EXISTS per script) and whether the wake was done (once per script).
---
--- task_exit(x, e): one task leaves, ``e`` says which and how: id, how (a key of EXITS), msg (the
--- message, for the event's type), and where they apply: lock (its lock key), progressed (false =
--- the run wrote no progress: nothing to clear), result (msgpack, for its children: completed),
--- key and keylist (its key, '' = none, and the key's list), pid and kind (a process input), mark
--- (the process's error; default error), attempt, error, due, recovered (the event's fields), more
--- (further field/value pairs for the event). Returns true when children were told (the caller
--- marks its reply: includes/flow ``told``).
--- @include "events"
--- @include "unique"
--- @include "flow"
--- @include "serial"
--- @include "process"
--- @include "slots"
local EXITS = {
  done       = {final = true, tell = 'c', forget = true, event = 'completed'},  -- succeeded, not kept
  completed  = {final = true, tell = 'c', event = 'completed'},                 -- succeeded, kept
  archived   = {final = true, tell = 'x', event = 'archived', process = true},
  cancelled  = {final = true, tell = 'x', event = 'cancelled', process = true},
  deleted    = {final = true, tell = 'd', forget = true, event = 'deleted'},
  debounced  = {final = true, tell = 'd', forget = true, event = 'debounced'},  -- replaced by a debounce
  aggregated = {final = true, tell = 'd', forget = true, event = 'aggregated'}, -- turned into one task
  retry      = {event = 'retry'},                 -- failed, retries left: its lock, key, children stay
  snoozed    = {event = 'scheduled'},             -- RateLimited: waits, nothing counted
  requeued   = {},                                -- shutdown: back to pending, no event
  run_ended  = {},                                -- a run task of a targeted task (includes/runs)
}
local function exit_cap(x)
  if not x.cap then
    x.cap = events_cap(x.conf)
  end
  return x.cap
end
local function exit_flows(x)
  if x.flows == nil then
    if x.deps then
      x.flows = redis.call('EXISTS', x.children, x.deps) > 0
    else
      x.flows = redis.call('EXISTS', x.children) > 0
    end
  end
  return x.flows
end
local function task_exit(x, e)
  local d = EXITS[e.how]
  if not d then
    error('task_exit: no such way of leaving: ' .. tostring(e.how))
  end
  local id = e.id
  if d.final and e.lock then
    release_lock(e.lock, id)
  end
  if x.progress and e.progressed ~= false then
    redis.call('HDEL', x.progress, id)
  end
  if d.event and exit_cap(x) > 0 then
    local mtype = msg_type(e.msg or '')
    if e.recovered then
      emit(x.events, x.cap, 'e', 'lease_expired', 'id', id, 'type', mtype, 'attempt', e.attempt)
    end
    local f = {'e', d.event, 'id', id, 'type', mtype}
    if e.attempt then
      f[#f + 1], f[#f + 2] = 'attempt', e.attempt
    end
    if e.error then
      f[#f + 1], f[#f + 2] = 'error', e.error
    end
    if e.due then
      f[#f + 1], f[#f + 2] = 'due', e.due
    end
    if e.more then
      for _, v in ipairs(e.more) do
        f[#f + 1] = v
      end
    end
    emit(x.events, x.cap, unpack(f))
  end
  local told_children = false
  if d.tell and x.children and exit_flows(x) then
    told_children = tell_children(x.children, x.outbox, id, d.tell, e.result)
    if d.forget then
      redis.call('HDEL', x.children, id)
      if x.deps then
        redis.call('HDEL', x.deps, id)
      end
    end
  end
  if d.final and e.key and e.key ~= '' and e.keylist then
    key_release(x.t, x.keyheld, x.blocked, x.pending, x.prio, x.wake, x.events, exit_cap(x), e.keylist, e.key, id)
  end
  if d.process and e.pid and e.pid ~= '' then
    proc_mark_error(x.proc, x.procs, e.pid, id, e.mark or e.error, x.now, e.kind)
  end
  if x.lease and not x.woke and x.conf and x.pending and x.wake then
    x.woke = true
    slot_freed(x.conf, x.lease, x.pending, x.prio, x.wake)  -- (once per script: one token wakes the next)
  end
  return told_children
end
