--[[ enqueue_keyed_many: (new) x N -> pending (its key was free) or blocked (behind the key's holder and
the tasks queued before it), in one call (the batch path of Client.enqueue_many for keyed tasks)
Each task is stored as enqueue_keyed.lua stores one, in the order given: tasks of one key keep their
order (the first takes a free key, the next ones queue behind it), and each task's reply is the one
enqueue_keyed would give it.
KEY tasks          tasks hash
KEY pending        pending list
KEY prio           pending ids of priorities other than the default (includes/priority)
KEY wake           wake-up list idle workers block on
KEY events         the queue's event stream
KEY conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEY blocked        blocked zset: ids waiting behind their key -> when enqueued (ms)
KEY keyheld        keyheld hash: key -> the id holding it (includes/serial)
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed       completed zset (a replaced completed task leaves it)
KEY tq       the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEY tr       the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEY tn       the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEY ta       the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEY children       children hash (includes/flow): the workflow children of a task dropped by a cap are told
KEY outbox         the queue's outbox stream (includes/flow)
KEY keylists...      each task's key's list of waiting ids, the i-th task's at KEYS[16+i]
ARG check          '1' = caller-chosen ids (checked for conflicts), '0' = generated
ARG now            '' = Redis time; else a simulated time in ms
ARG items...       id, msg (the encoded message), key triples, one per task
Returns one code per task, in order: 1 = pending (it holds the key), 2 = blocked, -2 = a live task
has this id (an id given twice in the batch: the second is refused).
Returns -10 (instead of a list) when the queue or a tenant of the batch is at its cap with overflow
'reject' (includes/cap: nothing stored); with 'drop_oldest' the oldest pending tasks are archived.
Sent again after a lost reply: each task finds its own stored write (new_id 'own'): nothing
written, 2 if it is still blocked, else 1 (as enqueue_keyed.lua does). The first task's store is
the call's first write: a full Redis refuses the call there, whole.
]]
--- @include "now"
--- @include "newtask"
--- @include "serial"
--- @include "stored"
--- @include "cap"
local check, now, cap = A.check == '1', now_ms(A.now), nil
local out = {}
local pk = {K.pending, K.prio, K.tq, K.tr, K.tn, K.ta}
local news = {n = 0, tenants = {}}  -- the tasks this call adds, for the cap (includes/cap): not those sent again
for i = 3, #AV, 3 do
  if new_id(K.tasks, AV[i], AV[i + 1], check) ~= 'own' then
    local tenant = msg_tenant(AV[i + 1], 1)
    news.n = news.n + 1
    if tenant then
      news.tenants[tenant] = (news.tenants[tenant] or 0) + 1
    end
  end
end
local victims = news.n > 0 and cap_gate(K.conf, pk, K.tasks, news)
if victims == false and news.n > 0 then
  return cap_refuse(K.conf, news.n)
end
for i = 3, #AV, 3 do
  local n = (i - 3) / 3 + 1
  local id, msg, key, list = AV[i], AV[i + 1], AV[i + 2], KV[16 + n]
  local refused = store_new(K.tasks, id, 'b', msg, check, list, 0, K.archived, K.completed)
  if refused == 1 then  -- sent again: its own write, still blocked (2) or admitted since (1)
    local v = redis.call('HGET', K.tasks, id)
    out[n] = stored_state(v) == 'b' and 2 or 1
  elseif refused then
    out[n] = refused
  else
    cap = cap or events_cap(K.conf)
    out[n] = key_admit(K.tasks, K.keyheld, K.blocked, pk, K.wake, K.events, cap, list, key, id, msg, now)
  end
end
if victims then
  cap_drop({t = K.tasks, events = K.events, conf = K.conf, children = K.children, outbox = K.outbox,
            pending = K.pending, prio = K.prio, tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta}, K.archived, victims)
end
return out
