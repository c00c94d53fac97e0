--[[ enqueue_target: (new) -> targeted
Stores a targeted task (``workers=`` and/or ``runs=``; includes/runs): it waits in the targeted
zset and in its index zsets, with a fresh record, and wakes the workers that may run it (their
own wake lists; the queue's wake list when any worker may). Id and uniqueness rules as enqueue.lua.
KEY tasks          tasks hash
KEY targeted       targeted tasks zset: id -> when enqueued (ms; tasks enqueued in the same ms
                   1/1024 ms apart, so the order is kept)
KEY runs           runs hash: id -> record
KEY wake           the queue's wake-up list
KEY lock           uniqueness lock key (the queue's never-set placeholder when not unique)
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed      completed zset (a replaced completed task leaves it)
KEY @events
KEY targets...      targets[1..k]: the index zsets: 'm:*' when any worker may run it, else 'm:w:<name>'
                   per name; then targets[k+1..]: the allowed workers' own wake lists ('wake:w:<name>';
                   none for any worker)
ARG id             task id
ARG msg            encoded message
ARG unique         uniqueness TTL in seconds; 0 = not unique
ARG check          '1' = the caller chose the id: check it; '0' = a generated (random) id
ARG runs_needed      how many distinct workers must run it successfully
ARG allowed        '*' (any worker) or the allowed names joined by ','
ARG now            '' = Redis time; else a simulated time in ms
ARG k              how many index zsets follow the fixed keys
Returns 1 = stored (or already stored by this same call, sent again), {-1, holder id, ms left} =
duplicate, -2 = a live task has this id.
]]
--- @include "now"
--- @include "signal"
--- @include "newtask"
--- @include "events"
--- @include "unique"
local id = A.id
local done = store_new(K.tasks, id, 'm', A.msg, A.check == '1', K.lock, tonumber(A.unique), K.archived, K.completed)
if done then
  return done
end
local now = now_ms(A.now)
local score = now
local newest = redis.call('ZRANGE', K.targeted, -1, -1, 'WITHSCORES')[2]
if newest and tonumber(newest) >= now then
  score = tonumber(newest) + 1 / 1024  -- enqueued in the same millisecond: after it (workers keep the order)
end
redis.call('ZADD', K.targeted, score, id)
redis.call('HSET', K.runs, id, A.runs_needed .. ' ' .. A.allowed .. ' 0')
local k = tonumber(A.k)
for i = 1, k do
  redis.call('ZADD', K.targets[i], score, id)
end
if k == K.targets.n then
  signal(K.wake)
else
  for i = k + 1, K.targets.n do
    signal(K.targets[i])
  end
end
emit(K.events, events_cap(K.conf), 'e', 'enqueued', 'id', id, 'type', msg_type(A.msg), 'runs', A.runs_needed,
  'workers', A.allowed)
return 1
