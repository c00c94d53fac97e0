--[[ snooze: active -> scheduled, not a failure
A handler raised RateLimited(retry_in): the task waits retry_in (a quota it depends on is spent),
then runs again. Its retry count and last error are untouched and nothing is counted: no failure,
no retry used up.
KEYS[1] tasks      tasks hash
KEYS[2] lease      lease zset
KEYS[3] scheduled  scheduled zset
KEYS[4] tick       forwarders' tick list (signalled when the task is the earliest due)
KEYS[5] progress   progress hash (the attempt's progress is cleared)
KEYS[6] events     the queue's event stream
KEYS[7] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] id
ARGV[2] token      the lease token the task was dequeued with
ARGV[3] delay      ms to wait (capped by the caller)
ARGV[4] now        '' = Redis time; else a simulated time in ms
Returns the due time (ms) = snoozed, 0 = no such task, -3 = the caller no longer holds the lease.
]]
--- @include "now"
--- @include "active"
--- @include "signal"
--- @include "events"
local id = ARGV[1]
local msg, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], 0, false)
if code ~= 1 then
  return code
end
local due = now_ms(ARGV[4]) + tonumber(ARGV[3])
redis.call('ZREM', KEYS[2], id)  -- first write, a removal: works on a full Redis
redis.call('HSET', KEYS[1], id, 's' .. msg)
signal_if_first(KEYS[3], due, KEYS[4])
redis.call('ZADD', KEYS[3], due, id)
redis.call('HDEL', KEYS[5], id)
emit(KEYS[6], events_cap(KEYS[7]), 'e', 'scheduled', 'id', id, 'type', msg_type(msg), 'due', due,
  'error', 'rate limited')
return due
