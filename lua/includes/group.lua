--- leave_group(group, groups, first, size, aggregating, name, ids): ``ids`` (a list, all members
--- of the group ``name``) leave it: out of its zset, the queue's counter and the group's size, and
--- the group out of the groups' zsets when it empties (else its oldest time is brought up to date).
local function leave_group(group, groups, first, size, aggregating, name, ids)
  local n = redis.call('ZREM', group, unpack(ids))
  if n == 0 then
    return
  end
  redis.call('DECRBY', aggregating, n)
  local oldest = redis.call('ZRANGE', group, 0, 0, 'WITHSCORES')
  if oldest[1] == nil then
    redis.call('ZREM', groups, name)
    redis.call('ZREM', first, name)
    redis.call('ZREM', size, name)
  else
    redis.call('ZINCRBY', size, -n, name)
    redis.call('ZADD', first, oldest[2], name)
  end
end
