--[[ cron_fire: (new) -> pending, for a scheduler entry's tick, exactly once across schedulers
Every scheduler computes the same due tick of an entry and calls this; the first call for a tick
records it as the entry's last and enqueues its task (id cron:<entry>:<tick>); the others find
the tick already fired and write nothing. A call planned from an outdated definition, for a
paused or removed entry, or early by Redis's clock (a scheduler whose clock runs ahead) writes
nothing either. With tick 0 it is a run-now (an operator's): no tick is recorded, pause ignored.
KEY cron          the queue's entry definitions (HASH name -> definition)
KEY cron_last      the queue's last fired tick per entry (HASH name -> ms)
KEY cron_paused      the queue's paused entries (SET)
KEY history       this entry's enqueue history (LIST, newest first: 'tick id enqueued_ms')
KEY tasks         tasks hash
KEY @pending
KEY wake          wake-up list
KEY @events
ARG name          the entry's name
ARG definition      the definition the caller planned from (must equal the stored one)
ARG tick          the tick (Unix ms); 0 = run now
ARG id            the task id (cron:<name>:<tick>, or a run-now's own)
ARG msg           the encoded (and, with signing, sealed) message
ARG now           '' = Redis time; else a simulated time in ms
ARG keep          history entries to keep
Returns {code, now}: 1 = enqueued; 0 = this tick was fired already (by another scheduler, or
this call sent again), or its task id is in use; -1 = no such entry; -2 = the definition changed
(reload it); -3 = the entry is paused; -4 = early: now is before the tick (wait and call again).
]]
--- @include "now"
--- @include "signal"
--- @include "events"
--- @include "priority"
local now = now_ms(A.now)
local name, tick = A.name, tonumber(A.tick)
local def = redis.call('HGET', K.cron, name)
if not def then
  return {-1, now}
end
if def ~= A.definition then
  return {-2, now}
end
if tick > 0 then
  if redis.call('SISMEMBER', K.cron_paused, name) == 1 then
    return {-3, now}
  end
  if now < tick then
    return {-4, now}
  end
  local last = tonumber(redis.call('HGET', K.cron_last, name) or '0')
  if last >= tick then
    return {0, now}
  end
  redis.call('HSET', K.cron_last, name, tick)  -- first write: a full Redis refuses the call here
end
local id = A.id
if redis.call('HEXISTS', K.tasks, id) == 1 then
  return {0, now}
end
redis.call('HSET', K.tasks, id, 'p' .. A.msg)
push_pending(G.pending, id, A.msg, 1, false)
signal(K.wake)
emit(K.events, events_cap(K.conf), 'e', 'enqueued', 'id', id, 'type', msg_type(A.msg))
redis.call('LPUSH', K.history, A.tick .. ' ' .. id .. ' ' .. now)
redis.call('LTRIM', K.history, 0, tonumber(A.keep) - 1)
return {1, now}
