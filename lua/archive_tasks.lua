--[[ archive_tasks: pending|scheduled|retry -> archived, by an operator
Archives each given task that is still in the expected state: removes it from its list or zset
(see the take include), stores it as archived (message unchanged, archived now) and releases its
uniqueness lock if it owns it. The archive's limits are left to the janitor (its trim counts what
they delete in `trimmed`). One task or a batch of at most ~1000 (archive_all loops in Python).
KEY tasks          tasks hash
KEY container      the state's list (pending) or zset (scheduled, retry)
KEY archived       archived zset: id -> time archived (ms)
KEY events         the queue's event stream
KEY conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEY prio           pending ids of priorities other than the default (includes/priority)
KEY children       children hash (includes/flow): the tasks waiting on an archived one are told
KEY outbox         the queue's outbox stream (includes/flow)
KEY keyheld        keyheld hash (includes/serial): an archived holder's key goes to its next task
KEY blocked        blocked zset (tasks waiting behind their key)
KEY pending        pending list (the key's next task is made pending)
KEY wake           wake-up list idle workers block on
KEY tq       the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEY tr       the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEY tn       the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEY ta       the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEY locks...       two per task, for the i-th (i = 1, 2, ...):
                   KEYS[15+2i] its uniqueness lock key (the queue's placeholder when not unique)
                   KEYS[16+2i] its key's list (the placeholder when it has no key)
ARG state          state char the tasks must be in: p s r
ARG window         pending only: how far from each end of the list an id is looked for
ARG now            '' = Redis time; else a simulated time in ms
ARG items...       id, hint, read, key quadruples, as in delete_tasks
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
return take_each(K.tasks, K.container, A.state, tonumber(A.window), AV, 4, function(id, v, n)
  local msg = stored_msg(v)
  redis.call('HSET', K.tasks, id, 'x' .. msg)
  redis.call('ZADD', K.archived, now, id)
  task_exit(x, {id = id, how = 'archived', msg = msg, error = 'archived by an operator', lock = KV[15 + 2 * n],
                key = AV[3 + 4 * n], keylist = KV[16 + 2 * n]})
end, exit_pk(x))
