--[[ ungroup: aggregating -> (deleted) | archived | pending, by an operator
Takes one task out of its aggregation group, if it is still there unchanged since the caller read
it: deletes it (releasing its uniqueness lock), archives it as it is, or runs it alone (to the head
of pending, with a wake-up token).
KEYS[1] tasks         tasks hash
KEYS[2] group         the task's group zset
KEYS[3] groups        name -> when its newest task joined
KEYS[4] groups_first  name -> when its oldest task joined
KEYS[5] groups_size   name -> its size
KEYS[6] aggregating   the queue's counter of tasks in groups
KEYS[7] target        archived zset (archive), pending list (run); the group zset otherwise (unused)
KEYS[8] wake          wake-up list idle workers block on
KEYS[9] lock          the task's uniqueness lock (the queue's placeholder when not unique)
KEYS[10] events       the queue's event stream
KEYS[11] conf         the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] id
ARGV[2] read     the stored value the caller read
ARGV[3] verb     delete | archive | run
ARGV[4] name     the group's name
ARGV[5] now      '' = Redis time; else a simulated time in ms
Returns 1 = done, 0 = no such task, -5 = not aggregating, -8 = changed since read (read it again).
]]
--- @include "now"
--- @include "signal"
--- @include "unique"
--- @include "group"
--- @include "events"
--- @include "operator"
operator_only(KEYS[1])  -- a producer is refused here, before any write
local id, verb = ARGV[1], ARGV[3]
local v = redis.call('HGET', KEYS[1], id)
if not v then
  return 0
end
if string.sub(v, 1, 1) ~= 'g' then
  return -5
end
if v ~= ARGV[2] then
  return -8
end
leave_group(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[4], {id})  -- removals first: runs on a full Redis
local msg = string.sub(v, 2)
local cap = events_cap(KEYS[11])
if verb == 'delete' then
  redis.call('HDEL', KEYS[1], id)
  release_lock(KEYS[9], id)
  emit(KEYS[10], cap, 'e', 'deleted', 'id', id, 'type', msg_type(msg))
elseif verb == 'archive' then
  redis.call('HSET', KEYS[1], id, 'x' .. msg)
  redis.call('ZADD', KEYS[7], now_ms(ARGV[5]), id)
  release_lock(KEYS[9], id)
  emit(KEYS[10], cap, 'e', 'archived', 'id', id, 'type', msg_type(msg))
else
  redis.call('HSET', KEYS[1], id, 'p' .. msg)
  redis.call('LPUSH', KEYS[7], id)
  signal(KEYS[8])
  emit(KEYS[10], cap, 'e', 'enqueued', 'id', id, 'type', msg_type(msg))
end
return 1
