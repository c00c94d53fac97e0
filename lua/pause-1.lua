--[[ pause: queue running -> paused (its tasks stay where they are; workers stop dequeuing it)
KEYS[1] paused   paused flag
ARGV[1] now      '' = Redis time; else a simulated time in ms (stored as the pause time)
Returns 1 = paused, 0 = it was already paused. Works when Redis is full (maxmemory): pausing is an
operator's first move then (includes/whenfull).
]]
--- @include "now"
--- @include "whenfull"
writable_when_full(KEYS[1])
if redis.call('SET', KEYS[1], now_ms(ARGV[1]), 'NX') then
  return 1
end
return 0
