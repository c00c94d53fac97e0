--[[ unpause: queue paused -> running; wakes an idle worker if tasks are waiting
KEY paused       paused flag
KEY @pending
KEY wake         wake-up list
Returns 1 = unpaused, 0 = it was not paused.
]]
--- @include "signal"
--- @include "priority"
--- @include "operator"
operator_only(K.paused)  -- an operator's: a producer is refused here, before any write
if redis.call('DEL', K.paused) == 0 then
  return 0
end
if pending_count(G.pending) > 0 then
  signal(K.wake)
end
return 1
