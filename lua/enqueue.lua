--[[ enqueue: (new) -> pending
Stores a task and appends it to its queue's pending list. A finished task (archived or completed)
with the same id is replaced; a live one (pending, active, scheduled, retry) is a conflict.
KEY tasks          tasks hash: id -> state char .. message
KEY lock           uniqueness lock key (the queue's never-set placeholder when not unique)
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed      completed zset (a replaced completed task leaves it)
KEY @exit           the keys a task's end shares (includes/exit): a task the admission drops ends
ARG id             task id
ARG msg            encoded message (msgpack)
ARG unique         uniqueness TTL in seconds; 0 = not unique
ARG check          '1' = the caller chose the id: check it; '0' = a generated (random) id
Note: ``unique`` is also a throttle window's TTL (the caller's task is then not unique: its lock is not
released when it finishes, only by the TTL).
Returns 1 = enqueued (or already enqueued by this same call, sent again after a lost reply: see
includes/newtask), {-1, holder id, ms left} = duplicate (lock held by another task), -2 = a live
task has this id, or the refusal of the producer entry (includes/admit: nothing written but its
counters; the code's exception: core/model/errors.py REPLY_ERRORS).
]]
--- @include "signal"
--- @include "newtask"
--- @include "events"
--- @include "unique"
--- @include "priority"
--- @include "admit"
local id = A.id
local refusal, ticket = admit_one(K, G.pending, id, A.msg, A.check == '1')
if refusal then
  return refusal
end
local done = store_new(K.tasks, id, 'p', A.msg, A.check == '1', K.lock, tonumber(A.unique), K.archived, K.completed)
if done then
  return done
end
admit_done(K, ticket)
push_pending(G.pending, id, A.msg, 1, false)
signal(K.wake)
emit_task(K.events, events_cap(K.conf), msg_tenant(A.msg, 1), 'e', 'enqueued', 'id', id, 'type', msg_type(A.msg))
return 1
