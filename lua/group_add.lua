--[[ group_add: (new) -> aggregating
Stores a task and adds it to its aggregation group, where it waits until a server's aggregator
turns the group's tasks into one task (see aggregate.lua). Id rules as enqueue.lua (includes/newtask).
KEY tasks             tasks hash
KEY group             the group's zset: id -> when it joined (ms, Redis clock; tasks that join in
                      the same millisecond 1/1024 ms apart, so the zset keeps their order)
KEY groups            the queue's groups: name -> when its newest task joined
KEY groups_first      name -> when its oldest task joined
KEY groups_size       name -> how many tasks it holds
KEY aggregating       counter of the queue's tasks in groups
KEY lock              uniqueness lock key (the queue's never-set placeholder when not unique)
KEY archived          archived zset (a replaced archived task leaves it)
KEY completed         completed zset (a replaced completed task leaves it)
KEY @events
ARG id            task id
ARG msg           encoded message (its group field names the group)
ARG unique        uniqueness TTL in seconds; 0 = not unique
ARG check         '1' = the caller chose the id: check it; '0' = a generated (random) id
ARG group_name      the group's name
ARG now           '' = Redis time; else a simulated time in ms
Returns 1 = added (or already added by this same call, sent again), {-1, holder id, ms left} =
duplicate (lock held by another task), -2 = a live task has this id.
]]
--- @include "now"
--- @include "newtask"
--- @include "events"
--- @include "unique"
local id, group = A.id, A.group_name
local done = store_new(K.tasks, id, 'g', A.msg, A.check == '1', K.lock, tonumber(A.unique), K.archived, K.completed)
if done then
  return done
end
local now = now_ms(A.now)
local newest = redis.call('ZRANGE', K.group, -1, -1, 'WITHSCORES')[2]
local score = now
if newest and tonumber(newest) >= now then
  score = tonumber(newest) + 1 / 1024  -- joined in the same millisecond: after it (the group keeps enqueue order)
end
redis.call('ZADD', K.group, score, id)
redis.call('ZADD', K.groups, now, group)
redis.call('ZADD', K.groups_first, 'NX', now, group)
redis.call('ZINCRBY', K.groups_size, 1, group)
redis.call('INCR', K.aggregating)
emit(K.events, events_cap(K.conf), 'e', 'enqueued', 'id', id, 'type', msg_type(A.msg), 'group', group)
return 1
