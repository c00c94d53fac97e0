--[[ edit_task: pending|scheduled|retry -> (the same task, changed), by an operator
Rewrites a waiting task's message (its payload or max_retry, by the caller) and, if asked, its due
time: due now or earlier -> pending (at the head: it runs after the tasks already waiting); due
later -> a pending or scheduled task becomes (stays) scheduled, a retry task stays a retry, at the
new time (a scheduled keyed task due now stays scheduled, due now: ARGV[10]). Only if the task
is still the one the caller read (byte for byte): else -8, read it again. Refused whole when Redis is full (an edit adds no way to free memory).
KEYS[1] tasks      tasks hash
KEYS[2] container  the list (pending) or zset (scheduled, retry) of the task's state
KEYS[3] scheduled  scheduled zset (where a task due later goes, unless it is a retry)
KEYS[4] pending    pending list (where a task due now goes)
KEYS[5] wake       wake-up list idle workers block on
KEYS[6] tick       forwarders' tick list (signalled when the new due time is the earliest)
KEYS[7] events     the queue's event stream
KEYS[8] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[9] prio       pending ids of priorities other than the default (includes/priority): a
                   pending task whose priority changes moves to the back of its new priority
KEYS[10] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[11] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[12] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[13] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] state      the state the caller read: p s r
ARGV[3] read       the stored value the caller read
ARGV[4] msg        the new encoded (and, with signing, sealed) message
ARGV[5] at_ms      '' = keep the due time; else the new due time (Unix ms)
ARGV[6] in_ms      '' = none; else the new due time as ms from now (Redis time)
ARGV[7] window     pending: how far from each end of the list the id is looked for
ARGV[8] hint       pending: the id's index located by the caller (a tenant's task: its seq),
                   -1 = none, -2 = nowhere
ARGV[9] now        '' = Redis time; else a simulated time in ms
ARGV[10] keyed     '1' = a keyed task (``key=``): a scheduled one due now or earlier stays scheduled,
                   due now by this script's clock, and the forwarder gives it its turn through its
                   key (key_gate); it never goes to pending here, past its key
Returns 1 = edited, 0 = no such task, -5 = in another state, -6 = (pending, moving to scheduled)
not found near either end of the list: locate it and call again, -8 = changed since read.
]]
--- @include "now"
--- @include "state"
--- @include "take"
--- @include "signal"
--- @include "events"
--- @include "priority"
--- @include "operator"
operator_only(KEYS[1])  -- a producer is refused here, before any write
local pk = {KEYS[4], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]}
local id, state, msg = ARGV[1], ARGV[2], ARGV[4]
local v, code = check_state(KEYS[1], KEYS[2], state, id)
if not v then
  return code
end
if v ~= ARGV[3] then
  return -8
end
redis.call('HSET', KEYS[1], id, v)  -- first write, a no-op: a full Redis refuses the edit here, whole
local now = now_ms(ARGV[9])
local due = nil
if ARGV[5] ~= '' then
  due = tonumber(ARGV[5])
elseif ARGV[6] ~= '' then
  due = now + tonumber(ARGV[6])
end
local new_state = state
local priority = msg_priority(msg, 1)
-- a keyed scheduled task due now takes its turn through its key (the forwarder's key_gate):
-- "now" is decided here, on the Redis clock, not by the caller's
local gated = due ~= nil and due <= now and ARGV[10] == '1' and state == 's'
if due == nil then
  if state == 'p' and priority ~= msg_priority(v, 2) then
    if not take(KEYS[2], 'p', id, tonumber(ARGV[7]), tonumber(ARGV[8]), pk, v) and ARGV[8] ~= '-2' then
      return -6
    end
    push_pending(pk, id, msg, 1, false)
  end
  redis.call('HSET', KEYS[1], id, state .. msg)
elseif due <= now and not gated then
  new_state = 'p'
  if state ~= 'p' then
    redis.call('ZREM', KEYS[2], id)
    push_pending(pk, id, msg, 1, false)
    signal(KEYS[5])
  end
  redis.call('HSET', KEYS[1], id, 'p' .. msg)
else
  local target = KEYS[3]
  if state == 'r' then
    target = KEYS[2]
  else
    new_state = 's'
  end
  if state == 'p' and not take(KEYS[2], 'p', id, tonumber(ARGV[7]), tonumber(ARGV[8]), pk, v)
      and ARGV[8] ~= '-2' then
    return -6
  end
  signal_if_first(target, due, KEYS[6])
  redis.call('ZADD', target, due, id)
  redis.call('HSET', KEYS[1], id, new_state .. msg)
end
emit(KEYS[7], events_cap(KEYS[8]), 'e', 'edited', 'id', id, 'type', msg_type(msg), 'state', new_state)
return 1
