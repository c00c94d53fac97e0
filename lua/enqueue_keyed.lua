--[[ enqueue_keyed: (new) -> pending (its key was free: it holds it now) or blocked (behind the
key's holder and the tasks queued before it)
KEY tasks          tasks hash
KEY pending        pending list
KEY prio           pending ids of priorities other than the default (includes/priority)
KEY wake           wake-up list idle workers block on
KEY events         the queue's event stream
KEY conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEY blocked        blocked zset: ids waiting behind their key -> when enqueued (ms)
KEY keyheld        keyheld hash: key -> the id holding it (includes/serial)
KEY keylist        the key's list of waiting ids
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed       completed zset (a replaced completed task leaves it)
KEY tq       the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEY tr       the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEY tn       the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEY ta       the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEY children       children hash (includes/flow): the workflow children of a task dropped by a cap are told
KEY outbox         the queue's outbox stream (includes/flow)
ARG id
ARG msg            the encoded message (its key field is ARGV[4])
ARG check          '1' = a caller-chosen id (checked for conflicts), '0' = generated
ARG key            the task's key
ARG now            '' = Redis time; else a simulated time in ms
Returns 1 = pending (it holds the key), 2 = blocked, -2 = a live task has this id, -10 = the queue
(or the task's tenant) is at its cap with overflow 'reject' (includes/cap; a keyed task counts as one
more pending for the cap, blocked or not). A holder whose
task is gone (deleted by hand) or ended does not hold the key any more: the new task takes it.
Sent again after a lost reply: its own stored task is found (new_id 'own'): nothing written, 2 if
it is still blocked, else 1.
]]
--- @include "now"
--- @include "newtask"
--- @include "serial"
--- @include "stored"
--- @include "cap"
local id, msg, key = A.id, A.msg, A.key
local pk = {K.pending, K.prio, K.tq, K.tr, K.tn, K.ta}
local tenant = msg_tenant(msg, 1)
local victims = cap_gate(K.conf, pk, K.tasks, {n = 1, tenants = tenant and {[tenant] = 1} or {}})
if victims == false and new_id(K.tasks, id, msg, A.check == '1') ~= 'own' then
  return cap_refuse(K.conf, 1)  -- (a keyed task counts as pending for its cap, blocked or not)
end
-- stored blocked first (the first write: a full Redis refuses the call here, whole), then admitted
local refused = store_new(K.tasks, id, 'b', msg, A.check == '1', K.keylist, 0, K.archived, K.completed)
if refused == 1 then  -- sent again: its own write, still blocked (2) or admitted since (1)
  local v = redis.call('HGET', K.tasks, id)
  return stored_state(v) == 'b' and 2 or 1
elseif refused then
  return refused
end
if victims then
  cap_drop({t = K.tasks, events = K.events, conf = K.conf, children = K.children, outbox = K.outbox,
            pending = K.pending, prio = K.prio, tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta}, K.archived, victims)
end
return key_admit(K.tasks, K.keyheld, K.blocked, pk, K.wake, K.events, events_cap(K.conf), K.keylist, key, id,
                 msg, now_ms(A.now))
