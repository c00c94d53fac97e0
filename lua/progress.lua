--[[ progress: (active) -> (active); a running task reports its progress
The handler called task.progress(value) (the worker rate-limits the calls). Stored as the task's
latest progress, and pushed to the inbox of the client waiting through Client.call, if any.
KEY tasks              tasks hash
KEY progress           progress hash: id -> latest value (msgpack)
KEY reply              the waiting client's inbox (the progress hash when nobody waits)
KEY @events
ARG id
ARG token              the lease token of the run reporting
ARG value              the progress value (msgpack)
ARG payload            what to push to the inbox (msgpack [id, 'p', value]), '' = nobody waits
Returns 1 = stored, 0 = no such task, -3 = the caller no longer holds the lease (not stored).
]]
--- @include "events"
--- @include "stored"
local id = A.id
local v = redis.call('HGET', K.tasks, id)
if not v then
  return 0
end
if not stored_holds(v, A.token) then
  return -3
end
redis.call('HSET', K.progress, id, A.value)
if A.payload ~= '' then
  redis.call('RPUSH', K.reply, A.payload)
  redis.call('PEXPIRE', K.reply, 600000)
end
emit(K.events, events_cap(K.conf), 'e', 'progress', 'id', id, 'type', msg_type(stored_msg(v)), 'value', A.value)
return 1
