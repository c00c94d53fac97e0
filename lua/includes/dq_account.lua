--- The dequeue's account (lua/dequeue.lua; docs/architecture.md "The dequeue, in stages"): the
--- limits a dequeue is held to, and what it leaves of them. The queue's limits (includes/dq_limits:
--- concurrency, and the rate's token bucket and waiter) are admitted before the take
--- (limits_admit lowers s.count) and settled here, after the lease; the tenants' slots and rates
--- (includes/dq_tenant) are admitted and charged turn by turn in the fair take, and counted here.
--- dq_account(s): a dequeue whose slots under the concurrency limit went to tasks it held is not
--- held back by the limit (they are free again: wait 0); s.remaining = the pending tasks left
--- (the list and the prio zset, whose size the take kept: includes/priority pending_count; the
--- tenants' while any takes turns: tenant_pending; runs of targeted tasks are not counted); then
--- the bucket and its waiter (limits_settle).
--- @include "dq_limits"
--- @include "dq_tenant"
local function dq_account(s)
  if s.held_any and s.wait < 0 then  -- the concurrency limit's slots held tasks took are free again: not held back by it
    s.wait = 0
  end
  s.remaining = redis.call('LLEN', K.pending) + s.prios  -- (includes/priority pending_count, prio's size known)
  tenant_pending(s)
  limits_settle(s)
end
