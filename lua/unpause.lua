--[[ unpause: queue paused -> running; wakes an idle worker if tasks are waiting
KEY paused       paused flag
KEY pending      pending list
KEY wake         wake-up list
KEY prio         pending ids of priorities other than the default
KEY tq      the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEY tr      the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEY tn      the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEY ta      the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
Returns 1 = unpaused, 0 = it was not paused.
]]
--- @include "signal"
--- @include "priority"
--- @include "operator"
operator_only(K.paused)  -- an operator's: a producer is refused here, before any write
if redis.call('DEL', K.paused) == 0 then
  return 0
end
if pending_count({K.pending, K.prio, K.tq}) > 0 then
  signal(K.wake)
end
return 1
