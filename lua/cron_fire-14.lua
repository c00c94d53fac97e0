--[[ cron_fire: (new) -> pending, for a scheduler entry's tick, exactly once across schedulers
Every scheduler computes the same due tick of an entry and calls this; the first call for a tick
records it as the entry's last and enqueues its task (id cron:<entry>:<tick>); the others find
the tick already fired and write nothing. A call planned from an outdated definition, for a
paused or removed entry, or early by Redis's clock (a scheduler whose clock runs ahead) writes
nothing either. With tick 0 it is a run-now (an operator's): no tick is recorded, pause ignored.
KEYS[1] cron      the queue's entry definitions (HASH name -> definition)
KEYS[2] cron_last  the queue's last fired tick per entry (HASH name -> ms)
KEYS[3] cron_paused  the queue's paused entries (SET)
KEYS[4] history   this entry's enqueue history (LIST, newest first: 'tick id enqueued_ms')
KEYS[5] tasks     tasks hash
KEYS[6] pending   pending list
KEYS[7] wake      wake-up list
KEYS[8] events    the queue's event stream
KEYS[9] conf      the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[10] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[11] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[12] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[13] prio  pending ids of priorities other than the default (includes/priority): the task
               goes where its priority and tenant say, as an enqueue's does
KEYS[14] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] name      the entry's name
ARGV[2] definition  the definition the caller planned from (must equal the stored one)
ARGV[3] tick      the tick (Unix ms); 0 = run now
ARGV[4] id        the task id (cron:<name>:<tick>, or a run-now's own)
ARGV[5] msg       the encoded (and, with signing, sealed) message
ARGV[6] now       '' = Redis time; else a simulated time in ms
ARGV[7] keep      history entries to keep
Returns {code, now}: 1 = enqueued; 0 = this tick was fired already (by another scheduler, or
this call sent again), or its task id is in use; -1 = no such entry; -2 = the definition changed
(reload it); -3 = the entry is paused; -4 = early: now is before the tick (wait and call again).
]]
--- @include "now"
--- @include "signal"
--- @include "events"
--- @include "priority"
local now = now_ms(ARGV[6])
local name, tick = ARGV[1], tonumber(ARGV[3])
local def = redis.call('HGET', KEYS[1], name)
if not def then
  return {-1, now}
end
if def ~= ARGV[2] then
  return {-2, now}
end
if tick > 0 then
  if redis.call('SISMEMBER', KEYS[3], name) == 1 then
    return {-3, now}
  end
  if now < tick then
    return {-4, now}
  end
  local last = tonumber(redis.call('HGET', KEYS[2], name) or '0')
  if last >= tick then
    return {0, now}
  end
  redis.call('HSET', KEYS[2], name, tick)  -- first write: a full Redis refuses the call here
end
local id = ARGV[4]
if redis.call('HEXISTS', KEYS[5], id) == 1 then
  return {0, now}
end
redis.call('HSET', KEYS[5], id, 'p' .. ARGV[5])
push_pending({KEYS[6], KEYS[13], KEYS[10], KEYS[11], KEYS[12], KEYS[14]}, id, ARGV[5], 1, false)
signal(KEYS[7])
emit(KEYS[8], events_cap(KEYS[9]), 'e', 'enqueued', 'id', id, 'type', msg_type(ARGV[5]))
redis.call('LPUSH', KEYS[4], ARGV[3] .. ' ' .. id .. ' ' .. now)
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[7]) - 1)
return {1, now}
