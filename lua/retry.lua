--[[ retry: active -> retry
A handler failed (or its lease expired, when the recoverer calls) and retries are left: the task
waits in the retry zset until now + delay. The uniqueness lock is kept (the task is still live).
KEY tasks              tasks hash
KEY lease              lease zset
KEY retry              retry zset: id -> due time (ms)
KEY tick               wake-up list forwarders block on
KEY processed          lifetime processed counter
KEY processed_day      today's processed counter
KEY failed             lifetime failed counter
KEY failed_day         today's failed counter
KEY progress           progress hash (the attempt's progress is cleared)
KEY @events
KEY wake       wake-up list idle workers block on (a slot freed in a limited queue wakes one: includes/exit)
KEY @pending
ARG id
ARG token              the lease token of the run being finished (the worker's, or the one the
                       recoverer read with the expired lease)
ARG msg                the message rewritten with retried + 1, the error and its time
ARG delay              milliseconds until the retry is due (>= 0)
ARG day_ttl            seconds to keep a daily counter
ARG now                '' = Redis time; else a simulated time in ms
ARG recover            '1' = the recoverer calls: the lease must also have expired; else '0'
ARG attempt            the failed attempt's number (for the events)
ARG error              its error (for the events)
Returns the due time (> 0) = moved to retry, 0 = no such task, -3 = lease not held (another run,
or not active), -4 = (recoverer) lease still alive.
The first write is a removal (ZREM of the lease), so a Redis at maxmemory still lets it run.
]]
--- @include "now"
--- @include "active"
--- @include "signal"
--- @include "counters"
--- @include "exit"
local id = A.id
local now = now_ms(A.now)
local _, code = claim_active(K.tasks, K.lease, id, A.token, now, A.recover == '1')
if code ~= 1 then
  return code
end
local due = now + tonumber(A.delay)
redis.call('ZREM', K.lease, id)  -- first write: a removal (see the header)
signal_if_first(K.retry, due, K.tick)
redis.call('ZADD', K.retry, due, id)
redis.call('HSET', K.tasks, id, 'r' .. A.msg)
local day_ttl = tonumber(A.day_ttl)
bump(K.processed, K.processed_day, day_ttl)
bump(K.failed, K.failed_day, day_ttl)
-- not an end: its lock, key and children stay with it
task_exit({t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, conf = K.conf,
          wake = K.wake, pending = K.pending, prio = K.prio, tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta},
          {id = id, how = 'retry', msg = A.msg, attempt = A.attempt, error = A.error, due = due,
           recovered = A.recover == '1'})
return due
