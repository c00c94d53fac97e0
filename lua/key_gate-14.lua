--[[ key_gate: scheduled -> pending (its key was free: it holds it now) or blocked, for a keyed task
that fell due (enqueue(key=..., process_in=...)). The forwarder leaves due keyed tasks in the
scheduled zset and names them; the caller reads each one's key from its message and gates it here
(the key's list must be among KEYS). A crash in between leaves the task due: the next pass names
it again.
KEYS[1] tasks      tasks hash
KEYS[2] scheduled  scheduled zset
KEYS[3] pending    pending list
KEYS[4] prio       pending ids of priorities other than the default (includes/priority)
KEYS[5] wake       wake-up list idle workers block on
KEYS[6] events     the queue's event stream
KEYS[7] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[8] blocked    blocked zset
KEYS[9] keyheld    keyheld hash: key -> the id holding it (includes/serial)
KEYS[10] keylist   the key's list of waiting ids
KEYS[11] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[12] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[13] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[14] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] key        the task's key (read from its message by the caller)
ARGV[3] read       the stored value the caller read: the task must still have it
ARGV[4] now        '' = Redis time; else a simulated time in ms
Returns 1 = pending (it holds the key), 2 = blocked, 0 = nothing done (changed since read, not
scheduled any more, or not due yet).
]]
--- @include "now"
--- @include "serial"
--- @include "stored"
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v or v ~= ARGV[3] or stored_state(v) ~= 's' then
  return 0
end
local now = now_ms(ARGV[4])
local due = tonumber(redis.call('ZSCORE', KEYS[2], id))
if not due or due > now then
  return 0
end
redis.call('ZREM', KEYS[2], id)
return key_admit(KEYS[1], KEYS[9], KEYS[8], {KEYS[3], KEYS[4], KEYS[11], KEYS[12], KEYS[13], KEYS[14]}, KEYS[5], KEYS[6], events_cap(KEYS[7]), KEYS[10], ARGV[2],
                 id, stored_msg(v), now)
