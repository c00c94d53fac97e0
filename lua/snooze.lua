--[[ snooze: active -> scheduled, not a failure
A handler raised RateLimited(retry_in): the task waits retry_in (a quota it depends on is spent),
then runs again. Its retry count and last error are untouched and nothing is counted: no failure,
no retry used up.
KEY tasks          tasks hash
KEY lease          lease zset
KEY scheduled      scheduled zset
KEY tick           forwarders' tick list (signalled when the task is the earliest due)
KEY progress       progress hash (the attempt's progress is cleared)
KEY @events
KEY wake      wake-up list idle workers block on (a slot freed in a limited queue wakes one: includes/exit)
KEY @pending
ARG id
ARG token          the lease token the task was dequeued with
ARG delay          ms to wait (capped by the caller)
ARG now            '' = Redis time; else a simulated time in ms
Returns the due time (ms) = snoozed, 0 = no such task, -3 = the caller no longer holds the lease.
]]
--- @include "now"
--- @include "active"
--- @include "signal"
--- @include "exit"
--- @include "bands"
local id = A.id
local msg, code = claim_active(K.tasks, K.lease, id, A.token, 0, false)
if code ~= 1 then
  return code
end
local due = now_ms(A.now) + tonumber(A.delay)
if due >= HOLD_FLOOR then  -- (before the first write: includes/bands)
  return error(DUE_REFUSED)
end
redis.call('ZREM', K.lease, id)  -- first write, a removal: works on a full Redis
redis.call('HSET', K.tasks, id, 's' .. msg)
signal_if_first(K.scheduled, due, K.tick)
redis.call('ZADD', K.scheduled, due, id)
-- not an end: its lock, key and children stay with it
task_exit({t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, conf = K.conf,
          wake = K.wake, pending = K.pending, prio = K.prio, tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta},
          {id = id, how = 'snoozed', msg = msg, due = due, error = 'rate limited'})
return due
