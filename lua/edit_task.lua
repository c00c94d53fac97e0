--[[ edit_task: pending|scheduled|retry -> (the same task, changed), by an operator
Rewrites a waiting task's message (its payload or max_retry, by the caller) and, if asked, its due
time: due now or earlier -> pending (at the head: it runs after the tasks already waiting); due
later -> a pending or scheduled task becomes (stays) scheduled, a retry task stays a retry, at the
new time (a scheduled keyed task due now stays scheduled, due now: ``keyed``). Only if the task
is still the one the caller read (byte for byte): else -8, read it again. Refused whole when Redis is full (an edit adds no way to free memory).
KEY tasks          tasks hash
KEY container      the list (pending) or zset (scheduled, retry) of the task's state
KEY scheduled      scheduled zset (where a task due later goes, unless it is a retry)
KEY @pending
KEY wake           wake-up list idle workers block on
KEY tick           forwarders' tick list (signalled when the new due time is the earliest)
KEY @events
ARG id
ARG state          the state the caller read: p s r
ARG read           the stored value the caller read
ARG msg            the new encoded (and, with signing, sealed) message
ARG at_ms          '' = keep the due time; else the new due time (Unix ms)
ARG in_ms          '' = none; else the new due time as ms from now (Redis time)
ARG window         pending: how far from each end of the list the id is looked for
ARG hint           pending: the id's index located by the caller (a tenant's task: its seq),
                   -1 = none, -2 = nowhere
ARG now            '' = Redis time; else a simulated time in ms
ARG keyed          '1' = a keyed task (``key=``): a scheduled one due now or earlier stays scheduled,
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
operator_only(K.tasks)  -- a producer is refused here, before any write
local pk = G.pending
local id, state, msg = A.id, A.state, A.msg
local v, code = check_state(K.tasks, K.container, state, id)
if not v then
  return code
end
if v ~= A.read then
  return -8
end
redis.call('HSET', K.tasks, id, v)  -- first write, a no-op: a full Redis refuses the edit here, whole
local now = now_ms(A.now)
local due = nil
if A.at_ms ~= '' then
  due = tonumber(A.at_ms)
elseif A.in_ms ~= '' then
  due = now + tonumber(A.in_ms)
end
local new_state = state
local priority = msg_priority(msg, 1)
-- a keyed scheduled task due now takes its turn through its key (the forwarder's key_gate):
-- "now" is decided here, on the Redis clock, not by the caller's
local gated = due ~= nil and due <= now and A.keyed == '1' and state == 's'
if due == nil then
  if state == 'p' and priority ~= msg_priority(v, 2) then
    if not take(K.container, 'p', id, tonumber(A.window), tonumber(A.hint), pk, v) and A.hint ~= '-2' then
      return -6
    end
    push_pending(pk, id, msg, 1, false)
  end
  redis.call('HSET', K.tasks, id, state .. msg)
elseif due <= now and not gated then
  new_state = 'p'
  if state ~= 'p' then
    redis.call('ZREM', K.container, id)
    push_pending(pk, id, msg, 1, false)
    signal(K.wake)
  end
  redis.call('HSET', K.tasks, id, 'p' .. msg)
else
  local target = K.scheduled
  if state == 'r' then
    target = K.container
  else
    new_state = 's'
  end
  if state == 'p' and not take(K.container, 'p', id, tonumber(A.window), tonumber(A.hint), pk, v)
      and A.hint ~= '-2' then
    return -6
  end
  signal_if_first(target, due, K.tick)
  redis.call('ZADD', target, due, id)
  redis.call('HSET', K.tasks, id, new_state .. msg)
end
emit(K.events, events_cap(K.conf), 'e', 'edited', 'id', id, 'type', msg_type(msg), 'state', new_state)
return 1
