--[[ cancel: active -> archived, by an operator; announces it so the worker stops the handler
The rule: a cancelled task is archived (last_error says it was cancelled), never retried on its
own; an operator can run it again from the archive. The caller read the task and passes the lease
token it saw: if the task was finished or re-leased since, nothing is done (-6) and the caller
reads it again. The worker learns of it from the PUBLISH at once (or, if it missed the message,
when its next lease renewal is refused); its late write is refused by the token check.
KEYS[1] t          tasks hash
KEYS[2] lease      lease zset
KEYS[3] archived   archived zset: id -> time archived (ms)
KEYS[4] lock       uniqueness lock key (the queue's placeholder when not unique)
KEYS[5] progress   progress hash (the task's progress is cleared)
KEYS[6] events     the queue's event stream
KEYS[7] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] id
ARGV[2] token      the lease token the caller read
ARGV[3] msg        the message rewritten with last_error and its time
ARGV[4] now        '' = Redis time; else a simulated time in ms
ARGV[5] channel    pub/sub channel workers listen on (a channel, not a key)
ARGV[6] notice     what is published (the queue and the id)
Returns 1 = cancelled, 0 = no such task, -5 = not active, -6 = re-leased or changed since read.
]]
--- @include "now"
--- @include "unique"
--- @include "events"
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v then
  return 0
end
if string.sub(v, 1, 1) ~= 'a' then
  return -5
end
if string.sub(v, 2, 9) ~= ARGV[2] then
  return -6
end
redis.call('ZREM', KEYS[2], id)
redis.call('ZADD', KEYS[3], now_ms(ARGV[4]), id)
redis.call('HSET', KEYS[1], id, 'x' .. ARGV[3])
release_lock(KEYS[4], id)
redis.call('HDEL', KEYS[5], id)
emit(KEYS[6], events_cap(KEYS[7]), 'e', 'cancelled', 'id', id, 'type', msg_type(ARGV[3]))
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
