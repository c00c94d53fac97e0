--[[ pause: queue running -> paused (its tasks stay where they are; workers stop dequeuing it)
KEY paused       paused flag
ARG now          '' = Redis time; else a simulated time in ms (stored as the pause time)
Returns 1 = paused, 0 = it was already paused. Works when Redis is full (maxmemory): pausing is an
operator's first move then (includes/whenfull).
]]
--- @include "now"
--- @include "whenfull"
writable_when_full(K.paused)
if redis.call('SET', K.paused, now_ms(A.now), 'NX') then
  return 1
end
return 0
