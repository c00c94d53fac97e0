--[[ run_tasks: scheduled|retry|archived -> pending, by an operator ("run now"); writes an 'enqueued'
event per task moved, its field 'from' the state it left (issue 42: it wrote none)
Moves each given task that is still in the expected state to the head of pending (it runs after
the tasks of its priority already waiting), message unchanged (an archived task keeps its retry count: if it fails
again with no retries left, it is archived again). Leaves a wake-up token so an idle worker takes
it at once. One task or a batch of at most ~1000 (run_all loops in Python).
An archived task's uniqueness lock was released when it was archived and is not taken again.
KEY tasks          tasks hash
KEY container      the state's zset (scheduled, retry, archived)
KEY @pending
KEY wake           wake-up list idle workers block on
KEY @events
ARG state          state char the tasks must be in: s r x
ARG ids...
An archived or scheduled keyed task (key=, includes/serial: its message's array reaches the key
field) is not moved: it would run beside its key's holder (a scheduled one takes its turn when it
falls due; an archived one is enqueued again instead).
Returns one code per task: 1 = now pending, 0 = no such task, -5 = in another state, -9 = an
archived or scheduled keyed task (refused).
]]
--- @include "state"
--- @include "signal"
--- @include "priority"
--- @include "serial"
--- @include "operator"
--- @include "stored"
--- @include "events"
operator_only(K.tasks)  -- a producer is refused here, before any write
local state = A.state
local out, moved = {}, 0
local cap = events_cap(K.conf)
for i = 1, A.ids.n do
  local id = A.ids[i]
  local v, code = check_state(K.tasks, K.container, state, id)
  if v and (state == 'x' or state == 's') and is_keyed(v, 2) then
    v, code = nil, -9
  end
  if v then
    redis.call('ZREM', K.container, id)
    redis.call('HSET', K.tasks, id, 'p' .. stored_msg(v))
    push_pending(G.pending, id, v, 2, false)
    local m = stored_msg(v)
    emit_task(K.events, cap, msg_tenant(m, 1), 'e', 'enqueued', 'id', id, 'type', msg_type(m), 'from', state)
    moved = moved + 1
  end
  out[#out + 1] = code
end
if moved > 0 then
  signal(K.wake)
end
return out
