--[[ enqueue_keyed_many: (new) x N -> pending (its key was free) or blocked (behind the key's holder and
the tasks queued before it), in one call (the batch path of Client.enqueue_many for keyed tasks)
Each task is stored as enqueue_keyed-15 stores one, in the order given: tasks of one key keep their
order (the first takes a free key, the next ones queue behind it), and each task's reply is the one
enqueue_keyed would give it.
KEYS[1] tasks      tasks hash
KEYS[2] pending    pending list
KEYS[3] prio       pending ids of priorities other than the default (includes/priority)
KEYS[4] wake       wake-up list idle workers block on
KEYS[5] events     the queue's event stream
KEYS[6] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[7] blocked    blocked zset: ids waiting behind their key -> when enqueued (ms)
KEYS[8] keyheld    keyheld hash: key -> the id holding it (includes/serial)
KEYS[9] archived   archived zset (a replaced archived task leaves it)
KEYS[10] completed  completed zset (a replaced completed task leaves it)
KEYS[11] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[12] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[13] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[14] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEYS[15..] keylists  each task's key's list of waiting ids, the i-th task's at KEYS[14+i]
ARGV[1] check      '1' = caller-chosen ids (checked for conflicts), '0' = generated
ARGV[2] now        '' = Redis time; else a simulated time in ms
ARGV[3..] items    id, msg (the encoded message), key triples, one per task
Returns one code per task, in order: 1 = pending (it holds the key), 2 = blocked, -2 = a live task
has this id (an id given twice in the batch: the second is refused).
Sent again after a lost reply: each task finds its own stored write (new_id 'own'): nothing
written, 2 if it is still blocked, else 1 (as enqueue_keyed-15 does). The first task's store is
the call's first write: a full Redis refuses the call there, whole.
]]
--- @include "now"
--- @include "newtask"
--- @include "serial"
--- @include "stored"
local check, now, cap = ARGV[1] == '1', now_ms(ARGV[2]), nil
local out = {}
local pk = {KEYS[2], KEYS[3], KEYS[11], KEYS[12], KEYS[13], KEYS[14]}
for i = 3, #ARGV, 3 do
  local n = (i - 3) / 3 + 1
  local id, msg, key, list = ARGV[i], ARGV[i + 1], ARGV[i + 2], KEYS[14 + n]
  local refused = store_new(KEYS[1], id, 'b', msg, check, list, 0, KEYS[9], KEYS[10])
  if refused == 1 then  -- sent again: its own write, still blocked (2) or admitted since (1)
    local v = redis.call('HGET', KEYS[1], id)
    out[n] = stored_state(v) == 'b' and 2 or 1
  elseif refused then
    out[n] = refused
  else
    cap = cap or events_cap(KEYS[6])
    out[n] = key_admit(KEYS[1], KEYS[8], KEYS[7], pk, KEYS[4], KEYS[5], cap, list, key, id, msg, now)
  end
end
return out
