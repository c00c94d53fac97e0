--[[ requeue: active -> pending (front)
Graceful shutdown ran out of time for a handler: the task goes back to the front of pending, its
retry count untouched and nothing counted, so it runs next and nothing is counted twice.
KEY tasks        tasks hash
KEY lease        lease zset
KEY @pending
KEY wake         wake-up list
KEY progress      progress hash (the attempt's progress is cleared)
ARG id
ARG token        the lease token
Returns 1 = requeued, 0 = no such task, -3 = lease not held.
]]
--- @include "active"
--- @include "signal"
--- @include "priority"
--- @include "exit"
local id = A.id
local msg, code = claim_active(K.tasks, K.lease, id, A.token, 0, false)
if code ~= 1 then
  return code
end
redis.call('ZREM', K.lease, id)
redis.call('HSET', K.tasks, id, 'p' .. msg)
local x = {t = K.tasks, lease = K.lease, progress = K.progress, pending = K.pending, prio = K.prio, tq = K.tq,
           tr = K.tr, tn = K.tn, ta = K.ta}
push_pending(exit_pk(x), id, msg, 1, true)
signal(K.wake)
-- not an end: its lock, key and children stay with it; it wakes a worker itself (above); its
-- tenant's slot is freed (the tenant duty)
task_exit(x, {id = id, how = 'requeued', msg = msg})
return 1
