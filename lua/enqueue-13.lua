--[[ enqueue: (new) -> pending
Stores a task and appends it to its queue's pending list. A finished task (archived or completed)
with the same id is replaced; a live one (pending, active, scheduled, retry) is a conflict.
KEYS[1] tasks      tasks hash: id -> state char .. message
KEYS[2] pending    pending list (new ids LPUSHed; workers pop from the right: FIFO) of the
                   default priority
KEYS[3] wake       wake-up list idle workers block on
KEYS[4] lock       uniqueness lock key (the queue's never-set placeholder when not unique)
KEYS[5] archived   archived zset (a replaced archived task leaves it)
KEYS[6] completed  completed zset (a replaced completed task leaves it)
KEYS[7] events     the queue's event stream
KEYS[8] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[9] prio       pending ids of priorities other than the default (includes/priority)
KEYS[10] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[11] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[12] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[13] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id         task id
ARGV[2] msg        encoded message (msgpack)
ARGV[3] unique     uniqueness TTL in seconds; 0 = not unique
ARGV[4] check      '1' = the caller chose the id: check it; '0' = a generated (random) id
Note: ARGV[3] is also a throttle window's TTL (the caller's task is then not unique: its lock is not
released when it finishes, only by the TTL).
Returns 1 = enqueued (or already enqueued by this same call, sent again after a lost reply: see
includes/newtask), {-1, holder id, ms left} = duplicate (lock held by another task), -2 = a live
task has this id.
]]
--- @include "signal"
--- @include "newtask"
--- @include "events"
--- @include "unique"
--- @include "priority"
local id = ARGV[1]
local done = store_new(KEYS[1], id, 'p', ARGV[2], ARGV[4] == '1', KEYS[4], tonumber(ARGV[3]), KEYS[5], KEYS[6])
if done then
  return done
end
push_pending({KEYS[2], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]}, id, ARGV[2], 1, false)
signal(KEYS[3])
emit_task(KEYS[7], events_cap(KEYS[8]), msg_tenant(ARGV[2], 1), 'e', 'enqueued', 'id', id, 'type', msg_type(ARGV[2]))
return 1
