--[[ key_free: the key's holder has ended without releasing it (deleted or archived by an operator,
or removed by hand): the next task of the key becomes pending and the holder (the janitor's sweep of
the keyheld hash; includes/serial)
KEY tasks          tasks hash
KEY @serial
KEY @events
KEY keylist        the key's list of waiting ids
ARG key
ARG holder         the holder the caller found stale (it must still hold the key, and still be stale:
                   gone, completed, archived, or blocked)
Returns 1 = released (to the next task, or the key freed), 0 = not stale any more (nothing done).
]]
--- @include "serial"
--- @include "stored"
local holder = redis.call('HGET', K.keyheld, A.key)
if holder ~= A.holder then
  return 0
end
local v = redis.call('HGET', K.tasks, holder)
local st = stored_state(v)
if v and st ~= 'c' and st ~= 'x' and st ~= 'b' then
  return 0
end
key_release(K.tasks, K.keyheld, K.blocked, G.pending, K.wake, K.events, events_cap(K.conf), K.keylist, A.key,
            holder)
return 1
