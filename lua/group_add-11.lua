--[[ group_add: (new) -> aggregating
Stores a task and adds it to its aggregation group, where it waits until a server's aggregator
turns the group's tasks into one task (see aggregate-10). Id rules as enqueue-13 (includes/newtask).
KEYS[1] tasks         tasks hash
KEYS[2] group         the group's zset: id -> when it joined (ms, Redis clock; tasks that join in
                      the same millisecond 1/1024 ms apart, so the zset keeps their order)
KEYS[3] groups        the queue's groups: name -> when its newest task joined
KEYS[4] groups_first  name -> when its oldest task joined
KEYS[5] groups_size   name -> how many tasks it holds
KEYS[6] aggregating   counter of the queue's tasks in groups
KEYS[7] lock          uniqueness lock key (the queue's never-set placeholder when not unique)
KEYS[8] archived      archived zset (a replaced archived task leaves it)
KEYS[9] completed     completed zset (a replaced completed task leaves it)
KEYS[10] events       the queue's event stream
KEYS[11] conf         the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] id        task id
ARGV[2] msg       encoded message (its group field names the group)
ARGV[3] unique    uniqueness TTL in seconds; 0 = not unique
ARGV[4] check     '1' = the caller chose the id: check it; '0' = a generated (random) id
ARGV[5] group_name  the group's name
ARGV[6] now       '' = Redis time; else a simulated time in ms
Returns 1 = added (or already added by this same call, sent again), {-1, holder id, ms left} =
duplicate (lock held by another task), -2 = a live task has this id.
]]
--- @include "now"
--- @include "newtask"
--- @include "events"
--- @include "unique"
local id, group = ARGV[1], ARGV[5]
local done = store_new(KEYS[1], id, 'g', ARGV[2], ARGV[4] == '1', KEYS[7], tonumber(ARGV[3]), KEYS[8], KEYS[9])
if done then
  return done
end
local now = now_ms(ARGV[6])
local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
local score = now
if newest and tonumber(newest) >= now then
  score = tonumber(newest) + 1 / 1024  -- joined in the same millisecond: after it (the group keeps enqueue order)
end
redis.call('ZADD', KEYS[2], score, id)
redis.call('ZADD', KEYS[3], now, group)
redis.call('ZADD', KEYS[4], 'NX', now, group)
redis.call('ZINCRBY', KEYS[5], 1, group)
redis.call('INCR', KEYS[6])
emit(KEYS[10], events_cap(KEYS[11]), 'e', 'enqueued', 'id', id, 'type', msg_type(ARGV[2]), 'group', group)
return 1
