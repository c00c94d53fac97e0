--[[ pause: queue running -> paused (its tasks stay where they are; workers stop dequeuing it)
KEYS[1] paused   paused flag
ARGV[1] now      '' = Redis time; else a simulated time in ms (stored as the pause time)
Returns 1 = paused, 0 = it was already paused.
]]
--- @include "now"
if redis.call('SET', KEYS[1], now_ms(ARGV[1]), 'NX') then
  return 1
end
return 0
