--[[ unpause: queue paused -> running; wakes an idle worker if tasks are waiting
KEYS[1] paused   paused flag
KEYS[2] pending  pending list
KEYS[3] wake     wake-up list
KEYS[4] prio     pending ids of priorities other than the default
KEYS[5] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[6] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[7] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[8] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
Returns 1 = unpaused, 0 = it was not paused.
]]
--- @include "signal"
--- @include "priority"
--- @include "operator"
operator_only(KEYS[1])  -- an operator's: a producer is refused here, before any write
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
if pending_count({KEYS[2], KEYS[4], KEYS[5]}) > 0 then
  signal(KEYS[3])
end
return 1
