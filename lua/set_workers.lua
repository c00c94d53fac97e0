--[[ set_workers: a targeted task -> the same task, allowed on other workers (an operator)
Changes which workers may run a targeted task (includes/runs): its message (the new worker list),
its record's allowed names and its index zsets. Runs already taken by workers no longer allowed
are given back at their next lease renewal (extend.lua); the workers newly allowed are woken. Only
if the task still holds the value the caller read: else -8 (read it again).
KEY tasks          tasks hash
KEY runs           runs hash: task id -> record
KEY targeted       targeted tasks zset (the task's score there is its index score)
KEY wake           the queue's wake-up list (woken when any worker may now run it)
KEY targets...     targets[1..a]: the index zsets the task leaves (its old ones); then
                   targets[a+1..a+b]: the index zsets it joins ('m:*', or 'm:w:<name>' per allowed
                   name); then targets[a+b+1..]: the newly allowed workers' own wake lists
ARG id
ARG read           the stored value the caller read
ARG msg            the new encoded (and, with signing, sealed) message
ARG allowed        '*' or the allowed names joined by ','
ARG a              how many old index zsets
ARG b              how many new index zsets
Returns 1 = changed, 0 = no such task, -5 = not targeted, -8 = changed since read.
]]
--- @include "signal"
--- @include "runs"
--- @include "operator"
--- @include "stored"
operator_only(K.tasks)  -- a producer is refused here, before any write
local id = A.id
local v = redis.call('HGET', K.tasks, id)
if not v then
  return 0
end
local rec = redis.call('HGET', K.runs, id)
if stored_state(v) ~= 'm' or not rec then
  return -5
end
if v ~= A.read then
  return -8
end
redis.call('HSET', K.tasks, id, 'm' .. A.msg)  -- first write: a full Redis refuses the change here, whole
local r = rec_parse(rec)
r.allowed = A.allowed
redis.call('HSET', K.runs, id, rec_build(r))
local a, b = tonumber(A.a), tonumber(A.b)
local score = redis.call('ZSCORE', K.targeted, id) or '0'
for i = 1, a do
  redis.call('ZREM', K.targets[i], id)
end
for i = a + 1, a + b do
  redis.call('ZADD', K.targets[i], score, id)
end
if A.allowed == '*' then
  signal(K.wake)
end
for i = a + b + 1, K.targets.n do
  signal(K.targets[i])
end
return 1
