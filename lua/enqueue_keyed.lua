--[[ enqueue_keyed: (new) -> pending (its key was free: it holds it now) or blocked (behind the
key's holder and the tasks queued before it)
KEY tasks          tasks hash
KEY @exit           the keys a task's end shares (includes/exit): a task the admission drops ends
KEY keylist        the key's list of waiting ids
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed       completed zset (a replaced completed task leaves it)
ARG id
ARG msg            the encoded message (its key field holds the ``key`` argument)
ARG check          '1' = a caller-chosen id (checked for conflicts; a finished task holding it is
                   replaced), '2' = the same, but a finished holder is a conflict too (an idempotent
                   call's repeat: it answers the finished call), '0' = generated
ARG key            the task's key
ARG now            '' = Redis time; else a simulated time in ms
Returns 1 = pending (it holds the key), 2 = blocked, -2 = a live task has this id, or the refusal of
the producer entry (includes/admit; a keyed task counts there as one more pending task, blocked or
not). A holder whose task is gone (deleted by hand) or ended does not hold the key any more: the new task takes it.
Sent again after a lost reply: its own stored task is found (new_id 'own'): nothing written, 2 if
it is still blocked, else 1.
]]
--- @include "now"
--- @include "newtask"
--- @include "serial"
--- @include "stored"
--- @include "admit"
local id, msg, key = A.id, A.msg, A.key
local check, keep = A.check ~= '0', A.check == '2'
local refusal, ticket = admit_one(K, G.pending, id, msg, check)
if refusal then
  return refusal
end
-- stored blocked first (the first write: a full Redis refuses the call here, whole), then admitted
local refused = store_new(K.tasks, id, 'b', msg, check, K.keylist, 0, K.archived, K.completed, keep)
if refused == 1 then  -- sent again: its own write, still blocked (2) or admitted since (1)
  local v = redis.call('HGET', K.tasks, id)
  return stored_state(v) == 'b' and 2 or 1
elseif refused then
  return refused
end
admit_done(K, ticket)
return key_admit(K.tasks, K.keyheld, K.blocked, G.pending, K.wake, K.events, events_cap(K.conf), K.keylist, key, id,
                 msg, now_ms(A.now))
