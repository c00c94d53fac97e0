--- signal(list): leave one wake-up token in a list that idle processes block on (BLPOP).
--- At most one token waits at a time, so a burst of writes costs one LLEN each, not a pile-up.
local function signal(list)
  if redis.call('LLEN', list) == 0 then
    redis.call('LPUSH', list, '1')
  end
end
