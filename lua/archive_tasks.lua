--[[ archive_tasks: pending|scheduled|retry -> archived, by an operator
Archives each given task that is still in the expected state: removes it from its list or zset
(see the take include), stores it as archived (message unchanged, archived now) and releases its
uniqueness lock if it owns it. The archive's limits are left to the janitor (its trim counts what
they delete in `trimmed`). One task or a batch of at most ~1000 (archive_all loops in Python).
KEY tasks          tasks hash
KEY container      the state's list (pending) or zset (scheduled, retry)
KEY archived       archived zset: id -> time archived (ms)
KEY @exit
KEY locks... {lock keylist}  one item per task, for the i-th (i = 1, 2, ...):
                   lock: its uniqueness lock key (the queue's placeholder when not unique)
                   keylist: its key's list (the placeholder when it has no key)
ARG state          state char the tasks must be in: p s r
ARG window         pending only: how far from each end of the list an id is looked for
ARG now            '' = Redis time; else a simulated time in ms
ARG items... {id hint read key}  one item per task, as in delete_tasks
Returns one code per task: 1 = archived, 0 = no such task, -5 = in another state,
-6 = (pending) not found near either end of the list and no usable hint, -8 = changed since read.
]]
--- @include "now"
--- @include "state"
--- @include "take"
--- @include "whenfull"
--- @include "stored"
--- @include "exit"
writable_when_full(K.tasks)  -- works at maxmemory: LSET (a placeholder) may come first
local now = now_ms(A.now)
local x = {t = K.tasks, events = K.events, conf = K.conf, prio = K.prio, children = K.children, outbox = K.outbox,
           keyheld = K.keyheld, blocked = K.blocked, pending = K.pending, wake = K.wake,
           tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta}
return take_each(K.tasks, K.container, A.state, tonumber(A.window), A.items, function(id, v, n, it)
  local msg = stored_msg(v)
  redis.call('HSET', K.tasks, id, 'x' .. msg)
  redis.call('ZADD', K.archived, now, id)
  task_exit(x, {id = id, how = 'archived', msg = msg, error = 'archived by an operator', lock = K.locks[n].lock,
                key = it.key, keylist = K.locks[n].keylist})
end, exit_pk(x))
