--[[ key_gate: scheduled -> pending (its key was free: it holds it now) or blocked, for a keyed task
that fell due (enqueue(key=..., process_in=...)). The forwarder leaves due keyed tasks in the
scheduled zset and names them; the caller reads each one's key from its message and gates it here
(the key's list must be among KEYS). A crash in between leaves the task due: the next pass names
it again.
KEY tasks          tasks hash
KEY scheduled      scheduled zset
KEY @serial
KEY @events
KEY keylist        the key's list of waiting ids
ARG id
ARG key            the task's key (read from its message by the caller)
ARG read           the stored value the caller read: the task must still have it
ARG now            '' = Redis time; else a simulated time in ms
Returns 1 = pending (it holds the key), 2 = blocked, 0 = nothing done (changed since read, not
scheduled any more, or not due yet).
]]
--- @include "now"
--- @include "serial"
--- @include "stored"
local id = A.id
local v = redis.call('HGET', K.tasks, id)
if not v or v ~= A.read or stored_state(v) ~= 's' then
  return 0
end
local now = now_ms(A.now)
local due = tonumber(redis.call('ZSCORE', K.scheduled, id))
if not due or due > now then
  return 0
end
redis.call('ZREM', K.scheduled, id)
return key_admit(K.tasks, K.keyheld, K.blocked, G.pending, K.wake, K.events, events_cap(K.conf), K.keylist, A.key,
                 id, stored_msg(v), now)
