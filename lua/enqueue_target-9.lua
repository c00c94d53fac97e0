--[[ enqueue_target: (new) -> targeted
Stores a targeted task (``workers=`` and/or ``runs=``; includes/runs): it waits in the targeted
zset and in its index zsets, with a fresh record, and wakes the workers that may run it (their
own wake lists; the queue's wake list when any worker may). Id and uniqueness rules as enqueue-13.
KEYS[1] tasks      tasks hash
KEYS[2] targeted   targeted tasks zset: id -> when enqueued (ms; tasks enqueued in the same ms
                   1/1024 ms apart, so the order is kept)
KEYS[3] runs       runs hash: id -> record
KEYS[4] wake       the queue's wake-up list
KEYS[5] lock       uniqueness lock key (the queue's never-set placeholder when not unique)
KEYS[6] archived   archived zset (a replaced archived task leaves it)
KEYS[7] completed  completed zset (a replaced completed task leaves it)
KEYS[8] events     the queue's event stream
KEYS[9] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[10..] targets  KEYS[10..9+k]: the index zsets: 'm:*' when any worker may run it, else 'm:w:<name>'
                   per name; then KEYS[10+k..]: the allowed workers' own wake lists ('wake:w:<name>';
                   none for any worker)
ARGV[1] id         task id
ARGV[2] msg        encoded message
ARGV[3] unique     uniqueness TTL in seconds; 0 = not unique
ARGV[4] check      '1' = the caller chose the id: check it; '0' = a generated (random) id
ARGV[5] runs_needed  how many distinct workers must run it successfully
ARGV[6] allowed    '*' (any worker) or the allowed names joined by ','
ARGV[7] now        '' = Redis time; else a simulated time in ms
ARGV[8] k          how many index zsets follow the fixed keys
Returns 1 = stored (or already stored by this same call, sent again), {-1, holder id, ms left} =
duplicate, -2 = a live task has this id.
]]
--- @include "now"
--- @include "signal"
--- @include "newtask"
--- @include "events"
--- @include "unique"
local id = ARGV[1]
local done = store_new(KEYS[1], id, 'm', ARGV[2], ARGV[4] == '1', KEYS[5], tonumber(ARGV[3]), KEYS[6], KEYS[7])
if done then
  return done
end
local now = now_ms(ARGV[7])
local score = now
local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
if newest and tonumber(newest) >= now then
  score = tonumber(newest) + 1 / 1024  -- enqueued in the same millisecond: after it (workers keep the order)
end
redis.call('ZADD', KEYS[2], score, id)
redis.call('HSET', KEYS[3], id, ARGV[5] .. ' ' .. ARGV[6] .. ' 0')
local k = tonumber(ARGV[8])
for i = 10, 9 + k do
  redis.call('ZADD', KEYS[i], score, id)
end
if 9 + k == #KEYS then
  signal(KEYS[4])
else
  for i = 10 + k, #KEYS do
    signal(KEYS[i])
  end
end
emit(KEYS[8], events_cap(KEYS[9]), 'e', 'enqueued', 'id', id, 'type', msg_type(ARGV[2]), 'runs', ARGV[5],
  'workers', ARGV[6])
return 1
