--[[ forward: scheduled -> pending, retry -> pending (when due)
Moves up to ``batch`` due tasks from each of the scheduled and retry zsets to pending (a retry of a
task enqueued with retry_front=True to the front of its priority, the others to the back), and
tells the caller how long it may sleep before the next one is due.
KEY scheduled      scheduled zset
KEY retry          retry zset
KEY tasks          tasks hash
KEY @pending
KEY wake           wake-up list
ARG batch          most tasks to move from each zset
ARG now            '' = Redis time; else a simulated time in ms
Returns {moved, next, id1, key1, id2, key2, ...}: next = ms until the next due task (0 = more are
due now; at most a day), -1 = none (held tasks, includes/hold, are never due); the pairs are the
due *keyed* tasks of the scheduled zset (key=, includes/serial) and their keys ('(unreadable)': a
message whose key cannot be read), left in place: they must take their key or queue behind it,
which the caller does with key_gate (their key's list is not among these KEYS). A keyed task due
for a retry holds its key already and is moved like any other.
]]
--- @include "now"
--- @include "signal"
--- @include "wait"
--- @include "priority"
--- @include "serial"
--- @include "stored"
--- @include "bands"
local now = now_ms(A.now)
local batch = tonumber(A.batch)
local moved = 0
local next_due = -1
local keyed = {}
local pk = G.pending
for z, zset in ipairs({K.scheduled, K.retry}) do
  local ids = redis.call('ZRANGE', zset, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
  for _, id in ipairs(ids) do
    local v = redis.call('HGET', K.tasks, id)
    if z == 1 and v and is_keyed(v, 2) then
      keyed[#keyed + 1] = id
      keyed[#keyed + 1] = msg_key(v, 2) or '(unreadable)'
      v = nil
    else
      redis.call('ZREM', zset, id)
    end
    if v then
      redis.call('HSET', K.tasks, id, 'p' .. stored_msg(v))
      push_pending(pk, id, v, 2, z == 2 and msg_retry_front(v, 2))
      moved = moved + 1
    end
  end
  local head = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if head[2] ~= nil and (z == 2 or tonumber(head[2]) < HOLD_FLOOR) then  -- (a held task is never due: includes/hold)
    local wait = wait_ms(head[2], now)
    if next_due < 0 or wait < next_due then next_due = wait end
  end
end
if moved > 0 then
  signal(K.wake)
end
local out = {moved, next_due}
for _, x in ipairs(keyed) do
  out[#out + 1] = x
end
return out
