--[[ unpause: queue paused -> running; wakes an idle worker if tasks are waiting
KEYS[1] paused   paused flag
KEYS[2] pending  pending list
KEYS[3] wake     wake-up list
Returns 1 = unpaused, 0 = it was not paused.
]]
--- @include "signal"
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if redis.call('LLEN', KEYS[2]) > 0 then
  signal(KEYS[3])
end
return 1
