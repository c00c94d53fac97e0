--- now_ms(arg): the time every decision in a script is made at, in Unix milliseconds.
--- Redis's own clock (TIME) unless the caller passes an explicit time (tests with a simulated
--- clock). Using the server's clock makes lease and schedule decisions immune to clock skew
--- between worker hosts.
local function now_ms(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
