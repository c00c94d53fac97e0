--- trim_archive(archived, tkey, trimmed, now, max_size, max_age_ms): enforce the archive's limits,
--- deleting the trimmed tasks' data too, and add their number to the queue's ``trimmed`` counter
--- (so queue_info reports how many failures the limits dropped). Bounded work: at most 100 tasks
--- removed per call in all (by age, then by size), oldest first. Returns the number of tasks removed.
local function trim_archive(archived, tkey, trimmed, now, max_size, max_age_ms)
  local removed = 0
  local old = redis.call('ZRANGE', archived, '-inf', '(' .. (now - max_age_ms), 'BYSCORE', 'LIMIT', 0, 100)
  for _, id in ipairs(old) do
    redis.call('HDEL', tkey, id)
    redis.call('ZREM', archived, id)
    removed = removed + 1
  end
  local excess = redis.call('ZCARD', archived) - max_size
  if excess > 100 - removed then excess = 100 - removed end  -- 100 in all, age and size together
  if excess > 0 then
    local ids = redis.call('ZRANGE', archived, 0, excess - 1)
    for _, id in ipairs(ids) do
      redis.call('HDEL', tkey, id)
    end
    redis.call('ZREMRANGEBYRANK', archived, 0, excess - 1)
    removed = removed + excess
  end
  if removed > 0 then
    redis.call('INCRBY', trimmed, removed)
  end
  return removed
end
