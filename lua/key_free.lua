--[[ key_free: the key's holder has ended without releasing it (deleted or archived by an operator,
or removed by hand): the next task of the key becomes pending and the holder (the janitor's sweep of
the keyheld hash; includes/serial)
KEY tasks          tasks hash
KEY keyheld        keyheld hash: key -> the id holding it
KEY blocked        blocked zset
KEY pending        pending list
KEY prio           pending ids of priorities other than the default (includes/priority)
KEY wake           wake-up list idle workers block on
KEY events         the queue's event stream
KEY conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEY keylist        the key's list of waiting ids
KEY tq       the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEY tr       the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEY tn       the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEY ta       the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
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
key_release(K.tasks, K.keyheld, K.blocked, {K.pending, K.prio, K.tq, K.tr, K.tn, K.ta}, K.wake, K.events, events_cap(K.conf), K.keylist, A.key,
            holder)
return 1
