--[[ done: active -> (deleted)
A handler succeeded and the task keeps no result (retention 0): delete it, release its uniqueness
lock, count it as processed.
KEYS[1] t              tasks hash
KEYS[2] lease          lease zset
KEYS[3] lock           uniqueness lock key (placeholder when not unique)
KEYS[4] processed      lifetime processed counter
KEYS[5] processed_day  today's processed counter
KEYS[6] progress       progress hash (the task's entry is cleared)
KEYS[7] watch          watch hash: id -> inbox ids of late waiters
KEYS[8] reply          the inbox of the client waiting through Client.call (the watch hash when none)
KEYS[9] events         the queue's event stream
KEYS[10] conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] id
ARGV[2] token          the lease token the task was dequeued with
ARGV[3] day_ttl        seconds to keep a daily counter
ARGV[4] payload        the outcome for the waiting client (msgpack [id, 'c', result]), '' = none
ARGV[5] attempt        the attempt's number (for the event)
Returns 1 = done (or a string: done, and the inbox ids of late waiters to notify), 0 = no such task, -3 = the caller no longer holds the lease (write refused).
]]
--- @include "active"
--- @include "unique"
--- @include "counters"
--- @include "notify"
--- @include "events"
local id = ARGV[1]
local msg, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], 0, false)
if code ~= 1 then
  return code
end
redis.call('HDEL', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
release_lock(KEYS[3], id)
bump(KEYS[4], KEYS[5], tonumber(ARGV[3]))
emit(KEYS[9], events_cap(KEYS[10]), 'e', 'completed', 'id', id, 'type', msg_type(msg), 'attempt', ARGV[5])
return notify(KEYS[6], KEYS[7], KEYS[8], id, ARGV[4])
