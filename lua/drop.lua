--[[ drop: (orphaned lease) -> (deleted)
The recoverer found an expired lease whose task is not active (its data deleted or corrupted by
hand, or rewritten to another state): remove the dangling lease so it is not reported again, and
the task's tenant slot with it (includes/priority tenant_left: a tenant's concurrency never keeps
a slot past a lease; a tenant held at it is back in the ring, and a worker is woken).
KEY lease        lease zset
KEY tasks        tasks hash
KEY @pending
KEY wake         wake-up list idle workers block on
ARG id
ARG now          '' = Redis time; else a simulated time in ms
Returns 1 = dropped, 0 = no such lease, -4 = refused: the lease is alive or the task is active
(an active task with an expired lease is retried or archived instead).
]]
--- @include "now"
--- @include "stored"
--- @include "signal"
--- @include "priority"
local id = A.id
local exp = redis.call('ZSCORE', K.lease, id)
if not exp then
  return 0
end
local v = redis.call('HGET', K.tasks, id)
if tonumber(exp) > now_ms(A.now) or stored_state(v) == 'a' then
  return -4
end
redis.call('ZREM', K.lease, id)
if redis.call('EXISTS', K.ta) == 1
    and tenant_left(G.pending, {id}) then
  signal(K.wake)
end
return 1
