--[[ forward: scheduled -> pending, retry -> pending (when due)
Moves up to ARGV[1] due tasks from each of the scheduled and retry zsets to pending (a retry of a
task enqueued with retry_front=True to the front of its priority, the others to the back), and
tells the caller how long it may sleep before the next one is due.
KEYS[1] scheduled  scheduled zset
KEYS[2] retry      retry zset
KEYS[3] tasks      tasks hash
KEYS[4] pending    pending list
KEYS[5] wake       wake-up list
KEYS[6] prio       pending ids of priorities other than the default (includes/priority)
KEYS[7] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[8] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[9] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[10] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] batch      most tasks to move from each zset
ARGV[2] now        '' = Redis time; else a simulated time in ms
Returns {moved, next, id1, id2, ...}: next = ms until the next due task (0 = more are due now; at
most a day), -1 = none (held tasks, includes/hold, are never due); the ids are due *keyed* tasks of the scheduled zset (key=, includes/serial),
left in place: they must take their key or queue behind it, which the caller does with key_gate
(their key's list is not among these KEYS). A keyed task due for a retry holds its key already and
is moved like any other.
]]
--- @include "now"
--- @include "signal"
--- @include "wait"
--- @include "priority"
--- @include "serial"
--- @include "stored"
local HOLD_FLOOR = 1e15  -- core/deploy.py HOLD_FLOOR: scores from here are held tasks (includes/hold)
local now = now_ms(ARGV[2])
local batch = tonumber(ARGV[1])
local moved = 0
local next_due = -1
local keyed = {}
local pk = {KEYS[4], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]}
for z = 1, 2 do
  local ids = redis.call('ZRANGE', KEYS[z], '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
  for _, id in ipairs(ids) do
    local v = redis.call('HGET', KEYS[3], id)
    if z == 1 and v and is_keyed(v, 2) then
      keyed[#keyed + 1] = id
      v = nil
    else
      redis.call('ZREM', KEYS[z], id)
    end
    if v then
      redis.call('HSET', KEYS[3], id, 'p' .. stored_msg(v))
      push_pending(pk, id, v, 2, z == 2 and msg_retry_front(v, 2))
      moved = moved + 1
    end
  end
  local head = redis.call('ZRANGE', KEYS[z], 0, 0, 'WITHSCORES')
  if head[2] ~= nil and (z == 2 or tonumber(head[2]) < HOLD_FLOOR) then  -- (a held task is never due: includes/hold)
    local wait = wait_ms(head[2], now)
    if next_due < 0 or wait < next_due then next_due = wait end
  end
end
if moved > 0 then
  signal(KEYS[5])
end
local out = {moved, next_due}
for _, id in ipairs(keyed) do
  out[#out + 1] = id
end
return out
