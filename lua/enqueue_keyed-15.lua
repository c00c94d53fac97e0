--[[ enqueue_keyed: (new) -> pending (its key was free: it holds it now) or blocked (behind the
key's holder and the tasks queued before it)
KEYS[1] tasks      tasks hash
KEYS[2] pending    pending list
KEYS[3] prio       pending ids of priorities other than the default (includes/priority)
KEYS[4] wake       wake-up list idle workers block on
KEYS[5] events     the queue's event stream
KEYS[6] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[7] blocked    blocked zset: ids waiting behind their key -> when enqueued (ms)
KEYS[8] keyheld    keyheld hash: key -> the id holding it (includes/serial)
KEYS[9] keylist    the key's list of waiting ids
KEYS[10] archived  archived zset (a replaced archived task leaves it)
KEYS[11] completed  completed zset (a replaced completed task leaves it)
KEYS[12] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[13] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[14] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[15] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] msg        the encoded message (its key field is ARGV[4])
ARGV[3] check      '1' = a caller-chosen id (checked for conflicts), '0' = generated
ARGV[4] key        the task's key
ARGV[5] now        '' = Redis time; else a simulated time in ms
Returns 1 = pending (it holds the key), 2 = blocked, -2 = a live task has this id. A holder whose
task is gone (deleted by hand) or ended does not hold the key any more: the new task takes it.
Sent again after a lost reply: its own stored task is found (new_id 'own'): nothing written, 2 if
it is still blocked, else 1.
]]
--- @include "now"
--- @include "newtask"
--- @include "serial"
--- @include "stored"
local id, msg, key = ARGV[1], ARGV[2], ARGV[4]
-- stored blocked first (the first write: a full Redis refuses the call here, whole), then admitted
local refused = store_new(KEYS[1], id, 'b', msg, ARGV[3] == '1', KEYS[9], 0, KEYS[10], KEYS[11])
if refused == 1 then  -- sent again: its own write, still blocked (2) or admitted since (1)
  local v = redis.call('HGET', KEYS[1], id)
  return stored_state(v) == 'b' and 2 or 1
elseif refused then
  return refused
end
return key_admit(KEYS[1], KEYS[8], KEYS[7], {KEYS[2], KEYS[3], KEYS[12], KEYS[13], KEYS[14], KEYS[15]}, KEYS[4], KEYS[5], events_cap(KEYS[6]), KEYS[9], key, id,
                 msg, now_ms(ARGV[5]))
