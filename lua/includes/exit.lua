--- Leaving for good (docs/architecture.md "Exit paths"): the bookkeeping shared by the scripts
--- through which a task ends or is removed (cancel, the operator's delete and archive, a debounce
--- replacement, ...): one function, so a path cannot skip a duty the others do.
---
--- task_exit(x, id, outcome, result): the task ``id`` has just left its state for good (``outcome``
--- 'x' archived, 'd' deleted, 'c' completed with ``result`` (msgpack, '' = none)). ``x`` names the
--- keys and values of the duties that apply (a field left nil skips its duty):
---   lock      its uniqueness lock key (the queue's placeholder when not unique): released if held
---   progress  the progress hash: its entry is cleared
---   children, outbox   (includes/flow) the tasks waiting on it are told its end; on a deletion its
---             children entry goes too, and (deps) its own record as a child
---   deps      the deps hash (deletions only)
---   key, keylist, t, keyheld, blocked, pending, prio, wake, events, cap   (includes/serial) its
---             key ('' = none) is released to the next task of the key if it holds it
--- Returns true when children were told (the caller marks its reply: includes/flow ``told``).
--- @include "unique"
--- @include "flow"
--- @include "serial"
local function task_exit(x, id, outcome, result)
  if x.lock then
    release_lock(x.lock, id)
  end
  if x.progress then
    redis.call('HDEL', x.progress, id)
  end
  local told_children = false
  if x.children then
    told_children = tell_children(x.children, x.outbox, id, outcome, result)
    if outcome == 'd' then
      redis.call('HDEL', x.children, id)
      if x.deps then
        redis.call('HDEL', x.deps, id)
      end
    end
  end
  if x.key and x.key ~= '' then
    key_release(x.t, x.keyheld, x.blocked, x.pending, x.prio, x.wake, x.events, x.cap, x.keylist, x.key, id)
  end
  return told_children
end
