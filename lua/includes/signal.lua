--- signal(list): leave one wake-up token in a list that idle processes block on (BLPOP).
--- At most one token waits at a time, so a burst of writes costs one LLEN each, not a pile-up.
local function signal(list)
  if redis.call('LLEN', list) == 0 then
    redis.call('LPUSH', list, '1')
  end
end

--- signal_if_first(zset, due, list): signal ``list`` if ``due`` comes before every entry of
--- ``zset`` (call it before adding the new entry), so forwarders re-plan their sleep.
local function signal_if_first(zset, due, list)
  local head = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if head[2] == nil or tonumber(head[2]) > due then
    signal(list)
  end
end
