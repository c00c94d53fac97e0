--[[ forward: scheduled -> pending, retry -> pending (when due)
Moves up to ``batch`` due tasks from each of the scheduled and retry zsets to pending (a retry of a
task enqueued with retry_front=True to the front of its priority, the others to the back), and
tells the caller how long it may sleep before the next one is due.
KEY scheduled      scheduled zset
KEY retry          retry zset
KEY tasks          tasks hash
KEY @pending
KEY wake           wake-up list
KEY keyheld        the keys' holders (includes/serial): a due keyed task whose key is free takes it here
KEY @events
ARG batch          most tasks to move from each zset
ARG now            '' = Redis time; else a simulated time in ms
A due *keyed* task of the scheduled zset (key=, includes/serial) whose key no task holds takes it
and is moved (its event: enqueued, as key_gate writes it); one whose key another task holds is
left in place and named: it must queue behind that holder (or free a stale one), which the
caller does with key_gate (the key's list is not among these KEYS). A keyed task due for a retry
holds its key already and is moved like any other.
Returns {moved, next, id1, key1, id2, key2, ...}: next = ms until the next due task (0 = more are
due now; at most a day), -1 = none (held tasks, includes/hold, are never due); the pairs are the
keyed tasks left in place and their keys ('(unreadable)': a message whose key cannot be read).
]]
--- @include "now"
--- @include "signal"
--- @include "wait"
--- @include "priority"
--- @include "serial"
--- @include "stored"
--- @include "evbatch"
--- @include "bands"
local now = now_ms(A.now)
local batch = tonumber(A.batch)
local moved = 0
local next_due = -1
local keyed = {}
local cap, events = nil, ev_batch()  -- (the events cap: read at the first keyed task taken here)
local pk = G.pending
for z, zset in ipairs({K.scheduled, K.retry}) do
  local ids = redis.call('ZRANGE', zset, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
  for _, id in ipairs(ids) do
    local v = redis.call('HGET', K.tasks, id)
    local p_at, k_at, f_at, t_at  -- (the fields read: one walk of the message)
    if v then p_at, k_at, f_at, t_at = msg_tail(v, 2) end
    local key = z == 1 and task_key_at(v, k_at)
    if key and not key_take(K.keyheld, key, id) then  -- held by another task: key_gate queues it
      keyed[#keyed + 1] = id
      keyed[#keyed + 1] = key
    else
      redis.call('ZREM', zset, id)
      if v then
        local tenant = tenant_at(v, t_at)
        redis.call('HSET', K.tasks, id, 'p' .. stored_msg(v))
        push_at(pk, id, priority_at(v, p_at), tenant, z == 2 and retry_front_at(v, f_at))
        moved = moved + 1
        if key then
          cap = cap or events_cap(K.conf)
          if cap > 0 then
            ev_batch_add(events, 'enqueued', id, msg_type(v, 2), tenant or '')
          end
        end
      end
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
if cap then
  ev_batch_emit(K.events, cap, events)
end
local out = {moved, next_due}
for _, x in ipairs(keyed) do
  out[#out + 1] = x
end
return out
