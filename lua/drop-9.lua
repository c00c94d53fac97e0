--[[ drop: (orphaned lease) -> (deleted)
The recoverer found an expired lease whose task is not active (its data deleted or corrupted by
hand, or rewritten to another state): remove the dangling lease so it is not reported again, and
the task's tenant slot with it (includes/priority tenant_left: a tenant's concurrency never keeps
a slot past a lease; a tenant held at it is back in the ring, and a worker is woken).
KEYS[1] lease    lease zset
KEYS[2] tasks    tasks hash
KEYS[3] pending  pending list (the pending keys, includes/priority: a held tenant goes back)
KEYS[4] prio     pending ids of priorities other than the default
KEYS[5] tq       the queue's tenant zset
KEYS[6] tr       the queue's ready ring of tenants
KEYS[7] tn       the queue's tenant hash
KEYS[8] ta       the queue's active tenant tasks (hash id -> tenant)
KEYS[9] wake     wake-up list idle workers block on
ARGV[1] id
ARGV[2] now      '' = Redis time; else a simulated time in ms
Returns 1 = dropped, 0 = no such lease, -4 = refused: the lease is alive or the task is active
(an active task with an expired lease is retried or archived instead).
]]
--- @include "now"
--- @include "stored"
--- @include "signal"
--- @include "priority"
local id = ARGV[1]
local exp = redis.call('ZSCORE', KEYS[1], id)
if not exp then
  return 0
end
local v = redis.call('HGET', KEYS[2], id)
if tonumber(exp) > now_ms(ARGV[2]) or stored_state(v) == 'a' then
  return -4
end
redis.call('ZREM', KEYS[1], id)
if redis.call('EXISTS', KEYS[8]) == 1
    and tenant_left({KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]}, {id}) then
  signal(KEYS[9])
end
return 1
