--- wait_ms(score, now): ms from now until a zset entry with this score is due: 0 when due, at most
--- a day (every caller sleeps less than that anyway). A score written by hand may be +inf or -inf,
--- which some Lua versions do not even parse: the reply must stay a finite integer.
local function wait_ms(score, now)
  local max_wait = 86400000
  local t = tonumber(score)
  if t == nil then  -- 'inf' or '-inf' unparsed
    t = string.find(score, '^%-') and now or now + max_wait
  end
  local wait = t - now
  if wait < 0 then
    return 0
  end
  if wait > max_wait then
    return max_wait
  end
  return wait
end
