--[[ schedule: (new) -> scheduled
Stores a task to become pending after a delay measured on the Redis server's clock, so a client
whose clock is off cannot make it run early. Same id rules as enqueue.
KEYS[1] t          tasks hash
KEYS[2] scheduled  scheduled zset: id -> due time (ms)
KEYS[3] tick       wake-up list forwarders block on (signalled when the earliest due time moves up)
KEYS[4] lock       uniqueness lock key (placeholder when not unique)
KEYS[5] archived   archived zset
KEYS[6] completed  completed zset
KEYS[7] events     the queue's event stream
KEYS[8] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] id         task id
ARGV[2] msg        encoded message
ARGV[3] unique     uniqueness TTL in seconds, counted from the due time; 0 = not unique
ARGV[4] delay      milliseconds from now until due (> 0)
ARGV[5] now        '' = Redis time; else a simulated time in ms (tests)
Returns the due time in ms (> 0) = scheduled, -1 = duplicate, -2 = a live task has this id.
]]
--- @include "now"
--- @include "signal"
--- @include "newtask"
--- @include "events"
local id = ARGV[1]
local seen = new_id(KEYS[1], id, ARGV[2], ARGV[6] == '1')
if seen == 'own' then
  return tonumber(redis.call('ZSCORE', KEYS[2], id)) or now_ms(ARGV[5])
elseif seen == 'taken' then
  return -2
end
local delay = tonumber(ARGV[4])
local ttl = tonumber(ARGV[3])
if ttl > 0 and not redis.call('SET', KEYS[4], id, 'NX', 'EX', ttl + math.ceil(delay / 1000)) then
  return -1
end
local due = now_ms(ARGV[5]) + delay
redis.call('HSET', KEYS[1], id, 's' .. ARGV[2])  -- first write: a full Redis refuses the call here
if seen == 'replace' then
  forget_finished(KEYS[5], KEYS[6], id)
end
signal_if_first(KEYS[2], due, KEYS[3])
redis.call('ZADD', KEYS[2], due, id)
emit(KEYS[7], events_cap(KEYS[8]), 'e', 'scheduled', 'id', id, 'type', msg_type(ARGV[2]), 'due', due)
return due
