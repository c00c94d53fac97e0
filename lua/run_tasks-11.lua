--[[ run_tasks: scheduled|retry|archived -> pending, by an operator ("run now"); writes an 'enqueued'
event per task moved, its field 'from' the state it left (issue 42: it wrote none)
Moves each given task that is still in the expected state to the head of pending (it runs after
the tasks of its priority already waiting), message unchanged (an archived task keeps its retry count: if it fails
again with no retries left, it is archived again). Leaves a wake-up token so an idle worker takes
it at once. One task or a batch of at most ~1000 (run_all loops in Python).
An archived task's uniqueness lock was released when it was archived and is not taken again.
KEYS[1] tasks      tasks hash
KEYS[2] container  the state's zset (scheduled, retry, archived)
KEYS[3] pending    pending list
KEYS[4] wake       wake-up list idle workers block on
KEYS[5] prio       pending ids of priorities other than the default (includes/priority)
KEYS[6] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[7] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[8] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[9] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEYS[10] events    the queue's event stream: an 'enqueued' event per task moved, with 'from' (s r x)
KEYS[11] conf      the queue's settings hash (the events' cap)
ARGV[1] state      state char the tasks must be in: s r x
ARGV[2..] ids
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
operator_only(KEYS[1])  -- a producer is refused here, before any write
local state = ARGV[1]
local out, moved = {}, 0
local cap = events_cap(KEYS[11])
for i = 2, #ARGV do
  local id = ARGV[i]
  local v, code = check_state(KEYS[1], KEYS[2], state, id)
  if v and (state == 'x' or state == 's') and is_keyed(v, 2) then
    v, code = nil, -9
  end
  if v then
    redis.call('ZREM', KEYS[2], id)
    redis.call('HSET', KEYS[1], id, 'p' .. stored_msg(v))
    push_pending({KEYS[3], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]}, id, v, 2, false)
    local m = stored_msg(v)
    emit_task(KEYS[10], cap, msg_tenant(m, 1), 'e', 'enqueued', 'id', id, 'type', msg_type(m), 'from', state)
    moved = moved + 1
  end
  out[#out + 1] = code
end
if moved > 0 then
  signal(KEYS[4])
end
return out
