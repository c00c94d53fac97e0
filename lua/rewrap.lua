--[[ rewrap: (any state but active) -> (the same task, its encrypted values sealed again)
Key rotation's write (``asynqpy keys rotate``, core/security/rotation.py): replaces a task's stored
value with the same message whose encrypted values were sealed again with the newest key (or a
tenant key's record in ``tkeys`` with the key sealed again). Only if the value is still the one the
caller read (byte for byte, state and lease included): a task that moved, ran or was edited since
is left for the next pass. Never an active task (its worker rewrites it from what it holds), and
never a change of state. Writes nothing else: no index or event changes.
KEY tasks          tasks hash (or the queue's tkeys hash)
ARG id
ARG read           the stored value the caller read
ARG value          the new stored value (the same state byte, the new message)
Returns 1 = rewritten, 0 = changed since read (or gone), -5 = active, or a change of state.
]]
--- @include "stored"
--- @include "operator"
operator_only(K.tasks)  -- a producer is refused here, before any write
local cur = redis.call('HGET', K.tasks, A.id)
if not cur or cur ~= A.read then
  return 0
end
if stored_state(cur) == 'a' or stored_state(A.value) ~= stored_state(cur) then
  return -5
end
redis.call('HSET', K.tasks, A.id, A.value)
return 1
