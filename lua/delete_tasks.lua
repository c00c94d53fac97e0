--[[ delete_tasks: pending|scheduled|retry|archived|completed|waiting -> (deleted), by an operator
Deletes each given task that is still in the expected state: removes it from its list or zset
(see the take include: never a scan of a long pending list), deletes its data and releases its
uniqueness lock if it owns it. One task (Inspector.delete_task) or a batch of at most ~1000
(delete_all, which loops in Python so Redis is never blocked for long).
KEY tasks          tasks hash
KEY container      the state's list (pending) or zset
KEY @exit
KEY deps           deps hash: a deleted task's record as a child goes too
KEY locks... {lock keylist}  one item per task, for the i-th (i = 1, 2, ...):
                   lock: its uniqueness lock key (the queue's placeholder when not unique)
                   keylist: its key's list (the placeholder when it has no key)
ARG state          state char the tasks must be in: p s r x c w b (never a = active)
ARG window         pending only: how far from each end of the list an id is looked for
ARG items... {id hint read key}  one item per task (key: the task's key= , '' = none)
                   hint (pending only): the id's index located by the caller, -1 = none, -2 = the
                   caller found it nowhere in the list (its data is deleted anyway); read: the
                   stored value the caller read, which the task must still have (the lock key
                   came from it; the id may have been reused for another task since)
Returns one code per task: 1 = deleted, 0 = no such task, -5 = in another state,
-6 = (pending) not found near either end of the list and no usable hint: locate it and call again,
-8 = changed since read: read it again.
]]
--- @include "state"
--- @include "take"
--- @include "whenfull"
--- @include "stored"
--- @include "exit"
writable_when_full(K.tasks)  -- works at maxmemory: LSET (a placeholder) may come first
local x = {t = K.tasks, events = K.events, conf = K.conf, blobs = K.blobs, prio = K.prio, children = K.children,
           outbox = K.outbox,
           deps = K.deps, keyheld = K.keyheld, blocked = K.blocked, pending = K.pending, wake = K.wake,
           tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta}
return take_each(K.tasks, K.container, A.state, tonumber(A.window), A.items, function(id, v, n, it)
  redis.call('HDEL', K.tasks, id)
  task_exit(x, {id = id, how = 'deleted', msg = stored_msg(v), lock = K.locks[n].lock, key = it.key,
                keylist = K.locks[n].keylist})
end, exit_pk(x))
