--[[ archive_tasks: pending|scheduled|retry -> archived, by an operator
Archives each given task that is still in the expected state: removes it from its list or zset
(see the take include), stores it as archived (message unchanged, archived now) and releases its
uniqueness lock if it owns it. The archive's limits are left to the janitor (its trim counts what
they delete in `trimmed`). One task or a batch of at most ~1000 (archive_all loops in Python).
KEYS[1] tasks      tasks hash
KEYS[2] container  the state's list (pending) or zset (scheduled, retry)
KEYS[3] archived   archived zset: id -> time archived (ms)
KEYS[4] events     the queue's event stream
KEYS[5] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[6] prio       pending ids of priorities other than the default (includes/priority)
KEYS[7] children   children hash (includes/flow): the tasks waiting on an archived one are told
KEYS[8] outbox     the queue's outbox stream (includes/flow)
KEYS[9] keyheld    keyheld hash (includes/serial): an archived holder's key goes to its next task
KEYS[10] blocked   blocked zset (tasks waiting behind their key)
KEYS[11] pending   pending list (the key's next task is made pending)
KEYS[12] wake      wake-up list idle workers block on
KEYS[13] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[14] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[15] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[16] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEYS[17..] locks   two per task, for the i-th (i = 1, 2, ...):
                   KEYS[15+2i] its uniqueness lock key (the queue's placeholder when not unique)
                   KEYS[16+2i] its key's list (the placeholder when it has no key)
ARGV[1] state      state char the tasks must be in: p s r
ARGV[2] window     pending only: how far from each end of the list an id is looked for
ARGV[3] now        '' = Redis time; else a simulated time in ms
ARGV[4..] items    id, hint, read, key quadruples, as in delete_tasks
Returns one code per task: 1 = archived, 0 = no such task, -5 = in another state,
-6 = (pending) not found near either end of the list and no usable hint, -8 = changed since read.
]]
--- @include "now"
--- @include "state"
--- @include "take"
--- @include "whenfull"
--- @include "stored"
--- @include "exit"
writable_when_full(KEYS[1])  -- works at maxmemory: LSET (a placeholder) may come first
local now = now_ms(ARGV[3])
local x = {t = KEYS[1], events = KEYS[4], conf = KEYS[5], prio = KEYS[6], children = KEYS[7], outbox = KEYS[8],
           keyheld = KEYS[9], blocked = KEYS[10], pending = KEYS[11], wake = KEYS[12],
           tq = KEYS[13], tr = KEYS[14], tn = KEYS[15], ta = KEYS[16]}
return take_each(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), 4, function(id, v, n)
  local msg = stored_msg(v)
  redis.call('HSET', KEYS[1], id, 'x' .. msg)
  redis.call('ZADD', KEYS[3], now, id)
  task_exit(x, {id = id, how = 'archived', msg = msg, error = 'archived by an operator', lock = KEYS[15 + 2 * n],
                key = ARGV[3 + 4 * n], keylist = KEYS[16 + 2 * n]})
end, exit_pk(x))
