--[[ unpause: queue paused -> running; wakes an idle worker if tasks are waiting
KEYS[1] paused   paused flag
KEYS[2] pending  pending list
KEYS[3] wake     wake-up list
KEYS[4] prio     pending ids of priorities other than the default
Returns 1 = unpaused, 0 = it was not paused.
]]
--- @include "signal"
--- @include "priority"
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if pending_count(KEYS[2], KEYS[4]) > 0 then
  signal(KEYS[3])
end
return 1
