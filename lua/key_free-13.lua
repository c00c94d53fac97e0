--[[ key_free: the key's holder has ended without releasing it (deleted or archived by an operator,
or removed by hand): the next task of the key becomes pending and the holder (the janitor's sweep of
the keyheld hash; includes/serial)
KEYS[1] tasks      tasks hash
KEYS[2] keyheld    keyheld hash: key -> the id holding it
KEYS[3] blocked    blocked zset
KEYS[4] pending    pending list
KEYS[5] prio       pending ids of priorities other than the default (includes/priority)
KEYS[6] wake       wake-up list idle workers block on
KEYS[7] events     the queue's event stream
KEYS[8] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[9] keylist    the key's list of waiting ids
KEYS[10] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[11] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[12] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[13] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] key
ARGV[2] holder     the holder the caller found stale (it must still hold the key, and still be stale:
                   gone, completed, archived, or blocked)
Returns 1 = released (to the next task, or the key freed), 0 = not stale any more (nothing done).
]]
--- @include "serial"
--- @include "stored"
local holder = redis.call('HGET', KEYS[2], ARGV[1])
if holder ~= ARGV[2] then
  return 0
end
local v = redis.call('HGET', KEYS[1], holder)
local st = stored_state(v)
if v and st ~= 'c' and st ~= 'x' and st ~= 'b' then
  return 0
end
key_release(KEYS[1], KEYS[2], KEYS[3], {KEYS[4], KEYS[5], KEYS[10], KEYS[11], KEYS[12], KEYS[13]}, KEYS[6], KEYS[7], events_cap(KEYS[8]), KEYS[9], ARGV[1],
            holder)
return 1
