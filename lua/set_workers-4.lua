--[[ set_workers: a targeted task -> the same task, allowed on other workers (an operator)
Changes which workers may run a targeted task (includes/runs): its message (the new worker list),
its record's allowed names and its index zsets. Runs already taken by workers no longer allowed
are given back at their next lease renewal (extend-5); the workers newly allowed are woken. Only
if the task still holds the value the caller read: else -8 (read it again).
KEYS[1] tasks      tasks hash
KEYS[2] runs       runs hash: task id -> record
KEYS[3] targeted   targeted tasks zset (the task's score there is its index score)
KEYS[4] wake       the queue's wake-up list (woken when any worker may now run it)
KEYS[5..] targets  KEYS[5..4+a]: the index zsets the task leaves (its old ones); then
                   KEYS[5+a..4+a+b]: the index zsets it joins ('m:*', or 'm:w:<name>' per allowed
                   name); then KEYS[5+a+b..]: the newly allowed workers' own wake lists
ARGV[1] id
ARGV[2] read       the stored value the caller read
ARGV[3] msg        the new encoded (and, with signing, sealed) message
ARGV[4] allowed    '*' or the allowed names joined by ','
ARGV[5] a          how many old index zsets
ARGV[6] b          how many new index zsets
Returns 1 = changed, 0 = no such task, -5 = not targeted, -8 = changed since read.
]]
--- @include "signal"
--- @include "runs"
--- @include "operator"
operator_only(KEYS[1])  -- a producer is refused here, before any write
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v then
  return 0
end
local rec = redis.call('HGET', KEYS[2], id)
if string.sub(v, 1, 1) ~= 'm' or not rec then
  return -5
end
if v ~= ARGV[2] then
  return -8
end
redis.call('HSET', KEYS[1], id, 'm' .. ARGV[3])  -- first write: a full Redis refuses the change here, whole
local r = rec_parse(rec)
r.allowed = ARGV[4]
redis.call('HSET', KEYS[2], id, rec_build(r))
local a, b = tonumber(ARGV[5]), tonumber(ARGV[6])
local score = redis.call('ZSCORE', KEYS[3], id) or '0'
for i = 5, 4 + a do
  redis.call('ZREM', KEYS[i], id)
end
for i = 5 + a, 4 + a + b do
  redis.call('ZADD', KEYS[i], score, id)
end
if ARGV[4] == '*' then
  signal(KEYS[4])
end
for i = 5 + a + b, #KEYS do
  signal(KEYS[i])
end
return 1
