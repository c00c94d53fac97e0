--[[ enqueue_lone: (new) -> pending, the lone producer's quick path
Stores one task with a generated id that is not unique and not delayed (Client.enqueue with
default options: core/client/lone.py) and makes it pending, as enqueue.lua does, in fewer keys
and commands: it names none of the keys a producer rule may need (the cap's drop archives tasks
through includes/exit), so when a rule is set for the queue or the task's tenant it writes
nothing and answers 'full': the client sends the task through enqueue.lua, which admits it
(includes/admit). A generated id (96 random bits) cannot collide: a task stored under it is this
call's own earlier write, sent again after a lost reply, and is reported enqueued (whatever
became of it since), as enqueue.lua's check '0' does.
KEY tasks          tasks hash: id -> state char .. message
KEY wake           wake-up list idle workers block on
KEY @pending       the pending keys (includes/priority: the task's priority and tenant)
KEY @events        the event stream and the queue's settings hash (the rules' fields, the cap)
ARG id             task id (generated)
ARG msg            encoded message (msgpack)
Returns 1 = enqueued (or already enqueued by this same call), 'full' = nothing written: a producer
rule is set (includes/admit admit_plain), the task goes through enqueue.lua instead.
]]
--- @include "signal"
--- @include "events"
--- @include "priority"
--- @include "admit"
local id, m = A.id, A.msg
local p, tenant = msg_priority_tenant(m, 1)
local plain, cap = admit_plain(K.conf, tenant)
if not plain then
  return 'full'
end
if redis.call('HSETNX', K.tasks, id, 'p' .. m) == 0 then  -- first write: a full Redis refuses the call here
  return 1  -- this call's own earlier write, sent again
end
push_at(G.pending, id, p, tenant, false)
signal(K.wake)
events_conf(K.conf)  -- (the stream's count of events: includes/events)
emit_task(K.events, cap, tenant, 'e', 'enqueued', 'id', id, 'type', msg_type(m))
return 1
