--[[ delete_tasks: pending|scheduled|retry|archived|completed|waiting -> (deleted), by an operator
Deletes each given task that is still in the expected state: removes it from its list or zset
(see the take include: never a scan of a long pending list), deletes its data and releases its
uniqueness lock if it owns it. One task (Inspector.delete_task) or a batch of at most ~1000
(delete_all, which loops in Python so Redis is never blocked for long).
KEYS[1] tasks      tasks hash
KEYS[2] container  the state's list (pending) or zset
KEYS[3] events     the queue's event stream
KEYS[4] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[5] prio       pending ids of priorities other than the default (includes/priority)
KEYS[6] children   children hash (includes/flow): the tasks waiting on a deleted one are told;
                   its entry goes with it
KEYS[7] outbox     the queue's outbox stream (includes/flow)
KEYS[8] deps       deps hash: a deleted task's record as a child goes too
KEYS[9] keyheld    keyheld hash (includes/serial): a deleted holder's key goes to its next task
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
ARGV[1] state      state char the tasks must be in: p s r x c w b (never a = active)
ARGV[2] window     pending only: how far from each end of the list an id is looked for
ARGV[3..] items    id, hint, read, key quadruples (key: the task's key= , '' = none)
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
writable_when_full(KEYS[1])  -- works at maxmemory: LSET (a placeholder) may come first
local x = {t = KEYS[1], events = KEYS[3], conf = KEYS[4], prio = KEYS[5], children = KEYS[6], outbox = KEYS[7],
           deps = KEYS[8], keyheld = KEYS[9], blocked = KEYS[10], pending = KEYS[11], wake = KEYS[12],
           tq = KEYS[13], tr = KEYS[14], tn = KEYS[15], ta = KEYS[16]}
return take_each(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), 3, function(id, v, n)
  redis.call('HDEL', KEYS[1], id)
  task_exit(x, {id = id, how = 'deleted', msg = stored_msg(v), lock = KEYS[15 + 2 * n], key = ARGV[2 + 4 * n],
                keylist = KEYS[16 + 2 * n]})
end, exit_pk(x))
