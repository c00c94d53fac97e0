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
ARGV[1] id
ARGV[2] token    the lease token
Returns 1 = requeued, 0 = no such task, -3 = lease not held.
]]
--- @include "active"
--- @include "signal"
--- @include "priority"
local id = ARGV[1]
local msg, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], 0, false)
if code ~= 1 then
  return code
end
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[1], id, 'p' .. msg)
push_pending(KEYS[3], KEYS[6], id, msg_priority(msg, 1), true)
signal(KEYS[4])
redis.call('HDEL', KEYS[5], id)
return 1
