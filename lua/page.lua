--[[ page: read one page of the tasks in one state (read-only; O(log N + page size))
Ranks count from the end tasks leave first: pending tasks in the order workers take them
(includes/priority: priorities 9..6 from the prio zset, then the default priority from the pending
list's right end, oldest first, then priorities 4..0; then the tasks with a tenant, by tenant
name, priority and age, each with its seq as its score), zsets by ascending score (`order` 'asc': next due, next lease expiry)
or descending (`order` 'desc': newest archived or completed first).
KEY container      the state's list (pending) or zset (lease, scheduled, retry, archived, completed)
KEY tasks          tasks hash
KEY prio           pending ids of priorities other than the default (read with kind 'list')
KEY tq      the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEY tr      the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEY tn      the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
ARG kind           'list' or 'zset'
ARG order          'asc' or 'desc' (zsets only)
ARG start          first rank (0-based)
ARG stop           last rank (inclusive)
ARG values         '1' = return each task's stored value, '0' = ids only
Returns {id1, score1, value1, id2, ...}: score '' for the list; value false when the task's data
is gone (or not asked for). A pending id '' is the placeholder of a removed task: skipped.
]]
--- @include "priority"
local start, stop = tonumber(A.start), tonumber(A.stop)
local ids, scores = {}, {}
local function from_prio(a, b)  -- ranks a..b of the prio zset
  if a <= b then
    for _, id in ipairs(redis.call('ZRANGE', K.prio, a, b)) do
      ids[#ids + 1] = id
      scores[#scores + 1] = ''
    end
  end
end
if A.kind == 'list' then
  local high = redis.call('ZCOUNT', K.prio, '-inf', '(' .. string.format('%.0f', HIGH_END))
  local n = redis.call('LLEN', K.container)
  from_prio(start, math.min(stop, high - 1))
  local a, b = math.max(start, high) - high, math.min(stop, high + n - 1) - high
  if a <= b then
    local got = redis.call('LRANGE', K.container, -1 - b, -1 - a)
    for i = #got, 1, -1 do
      ids[#ids + 1] = got[i]
      scores[#scores + 1] = ''
    end
  end
  from_prio(math.max(start, high + n) - n, stop - n)
  local plain = n + redis.call('ZCARD', K.prio)
  local a2, b2 = math.max(start, plain) - plain, stop - plain
  if a2 <= b2 then  -- then the tenants' tasks, tenant by tenant (score: the task's seq)
    for _, member in ipairs(redis.call('ZRANGE', K.tq, a2, b2)) do
      local at = string.find(member, '\0', 1, true)
      ids[#ids + 1] = string.sub(member, at + 18)
      scores[#scores + 1] = string.sub(member, at + 2, at + 17)
    end
  end
else
  local got
  if A.order == 'desc' then
    got = redis.call('ZRANGE', K.container, start, stop, 'REV', 'WITHSCORES')
  else
    got = redis.call('ZRANGE', K.container, start, stop, 'WITHSCORES')
  end
  for i = 1, #got, 2 do
    ids[#ids + 1] = got[i]
    scores[#scores + 1] = got[i + 1]
  end
end
local out = {}
for i, id in ipairs(ids) do
  if id ~= '' then
    out[#out + 1] = id
    out[#out + 1] = scores[i]
    out[#out + 1] = A.values == '1' and redis.call('HGET', K.tasks, id) or false
  end
end
return out
