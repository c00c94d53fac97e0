--[[ fail_waiting: waiting -> archived, when a parent failed and the child's policy is cancel
The propagator (or the client, when a parent had already failed) archives the child with an error
naming the parent; the child's own children are told in turn (their outbox entry cancels them,
or runs them, by their own policies).
KEYS[1] tasks      tasks hash
KEYS[2] waiting    waiting zset
KEYS[3] archived   archived zset: id -> time archived (ms)
KEYS[4] children   children hash (includes/flow)
KEYS[5] outbox     the queue's outbox stream (includes/flow)
KEYS[6] events     the queue's event stream
KEYS[7] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] id
ARGV[2] read       the stored value the caller read ('w' .. message): it must be unchanged
ARGV[3] msg        the message rewritten with the error
ARGV[4] now        '' = Redis time; else a simulated time in ms
ARGV[5] error      the error (for the event)
Returns 1 = archived ('!' when it had children of its own), 0 = no such task, -8 = changed since
read (or no longer waiting).
]]
--- @include "now"
--- @include "events"
--- @include "flow"
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v then
  return 0
elseif v ~= ARGV[2] or string.sub(v, 1, 1) ~= 'w' then
  return -8
end
redis.call('HSET', KEYS[1], id, 'x' .. ARGV[3])
redis.call('ZREM', KEYS[2], id)
redis.call('ZADD', KEYS[3], now_ms(ARGV[4]), id)
emit(KEYS[6], events_cap(KEYS[7]), 'e', 'archived', 'id', id, 'type', msg_type(ARGV[3]), 'error', ARGV[5])
return told(1, tell_children(KEYS[4], KEYS[5], id, 'x', ''))
