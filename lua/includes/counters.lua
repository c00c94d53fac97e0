--- bump(total_key, day_key, day_ttl): count one event in a lifetime counter and a daily counter;
--- the daily counter expires day_ttl seconds after its first event of the day.
local function bump(total_key, day_key, day_ttl)
  redis.call('INCR', total_key)
  if redis.call('INCR', day_key) == 1 then
    redis.call('EXPIRE', day_key, day_ttl)
  end
end
