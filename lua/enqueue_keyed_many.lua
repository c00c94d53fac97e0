--[[ enqueue_keyed_many: (new) x N -> pending (its key was free) or blocked (behind the key's holder and
the tasks queued before it), in one call (the batch path of Client.enqueue_many for keyed tasks)
Each task is stored as enqueue_keyed.lua stores one, in the order given: tasks of one key keep their
order (the first takes a free key, the next ones queue behind it), and each task's reply is the one
enqueue_keyed would give it.
KEY tasks          tasks hash
KEY @exit           the keys a task's end shares (includes/exit): a task the admission drops ends
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed       completed zset (a replaced completed task leaves it)
KEY keylists...      each task's key's list of waiting ids, the i-th task's at K.keylists[i]
ARG check          '1' = caller-chosen ids (checked for conflicts), '0' = generated
ARG now            '' = Redis time; else a simulated time in ms
ARG items... {id msg key}  one item per task: id, msg (the encoded message), key
Returns the refusal of the producer entry (includes/admit) instead of a list: nothing stored.
Returns one code per task, in order: 1 = pending (it holds the key), 2 = blocked, -2 = a live task
has this id (an id given twice in the batch: the second is refused).
Sent again after a lost reply: each task finds its own stored write (new_id 'own'): nothing
written, 2 if it is still blocked, else 1 (as enqueue_keyed.lua does). The first task's store is
the call's first write: a full Redis refuses the call there, whole.
]]
--- @include "now"
--- @include "newtask"
--- @include "serial"
--- @include "stored"
--- @include "admit"
local check, now, cap = A.check == '1', now_ms(A.now), nil
local out = {}
local pk = G.pending
local news = admit_news()  -- the tasks this call adds (includes/admit): not those sent again
for n = 1, A.items.n do
  local it = A.items[n]
  if new_id(K.tasks, it.id, it.msg, check) ~= 'own' then
    admit_count(news, it.msg, 1)
  end
end
local refusal, ticket = admit(K, pk, news)
if refusal then
  return refusal
end
for n = 1, A.items.n do
  local it = A.items[n]
  local id, msg, key, list = it.id, it.msg, it.key, K.keylists[n]
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
admit_done(K, ticket)
return out
