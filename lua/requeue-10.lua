--[[ requeue: active -> pending (front)
Graceful shutdown ran out of time for a handler: the task goes back to the front of pending, its
retry count untouched and nothing counted, so it runs next and nothing is counted twice.
KEYS[1] tasks    tasks hash
KEYS[2] lease    lease zset
KEYS[3] pending  pending list (RPUSH = the end workers pop from = the front)
KEYS[4] wake     wake-up list
KEYS[5] progress  progress hash (the attempt's progress is cleared)
KEYS[6] prio     pending ids of priorities other than the default (includes/priority): the
                 front of the task's own priority
KEYS[7] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[8] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[9] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[10] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] token    the lease token
Returns 1 = requeued, 0 = no such task, -3 = lease not held.
]]
--- @include "active"
--- @include "signal"
--- @include "priority"
--- @include "exit"
local id = ARGV[1]
local msg, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], 0, false)
if code ~= 1 then
  return code
end
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[1], id, 'p' .. msg)
local x = {t = KEYS[1], lease = KEYS[2], progress = KEYS[5], pending = KEYS[3], prio = KEYS[6], tq = KEYS[7],
           tr = KEYS[8], tn = KEYS[9], ta = KEYS[10]}
push_pending(exit_pk(x), id, msg, 1, true)
signal(KEYS[4])
-- not an end: its lock, key and children stay with it; it wakes a worker itself (above); its
-- tenant's slot is freed (the tenant duty)
task_exit(x, {id = id, how = 'requeued', msg = msg})
return 1
