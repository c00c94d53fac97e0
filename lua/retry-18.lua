--[[ retry: active -> retry
A handler failed (or its lease expired, when the recoverer calls) and retries are left: the task
waits in the retry zset until now + delay. The uniqueness lock is kept (the task is still live).
KEYS[1] tasks          tasks hash
KEYS[2] lease          lease zset
KEYS[3] retry          retry zset: id -> due time (ms)
KEYS[4] tick           wake-up list forwarders block on
KEYS[5] processed      lifetime processed counter
KEYS[6] processed_day  today's processed counter
KEYS[7] failed         lifetime failed counter
KEYS[8] failed_day     today's failed counter
KEYS[9] progress       progress hash (the attempt's progress is cleared)
KEYS[10] events         the queue's event stream
KEYS[11] conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[12] wake  wake-up list idle workers block on (a slot freed in a limited queue wakes one: includes/exit)
KEYS[13] pending  pending list (counted for that wake)
KEYS[14] prio  pending ids of priorities other than the default (counted too)
KEYS[15] tq  the queue's tenant zset (counted too; includes/priority)
KEYS[16] tr  the queue's ready ring of tenants
KEYS[17] tn  the queue's tenant hash
KEYS[18] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] token          the lease token of the run being finished (the worker's, or the one the
                       recoverer read with the expired lease)
ARGV[3] msg            the message rewritten with retried + 1, the error and its time
ARGV[4] delay          milliseconds until the retry is due (>= 0)
ARGV[5] day_ttl        seconds to keep a daily counter
ARGV[6] now            '' = Redis time; else a simulated time in ms
ARGV[7] recover        '1' = the recoverer calls: the lease must also have expired; else '0'
ARGV[8] attempt        the failed attempt's number (for the events)
ARGV[9] error          its error (for the events)
Returns the due time (> 0) = moved to retry, 0 = no such task, -3 = lease not held (another run,
or not active), -4 = (recoverer) lease still alive.
The first write is a removal (ZREM of the lease), so a Redis at maxmemory still lets it run.
]]
--- @include "now"
--- @include "active"
--- @include "signal"
--- @include "counters"
--- @include "exit"
local id = ARGV[1]
local now = now_ms(ARGV[6])
local _, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], now, ARGV[7] == '1')
if code ~= 1 then
  return code
end
local due = now + tonumber(ARGV[4])
redis.call('ZREM', KEYS[2], id)  -- first write: a removal (see the header)
signal_if_first(KEYS[3], due, KEYS[4])
redis.call('ZADD', KEYS[3], due, id)
redis.call('HSET', KEYS[1], id, 'r' .. ARGV[3])
local day_ttl = tonumber(ARGV[5])
bump(KEYS[5], KEYS[6], day_ttl)
bump(KEYS[7], KEYS[8], day_ttl)
-- not an end: its lock, key and children stay with it
task_exit({t = KEYS[1], lease = KEYS[2], progress = KEYS[9], events = KEYS[10], conf = KEYS[11],
          wake = KEYS[12], pending = KEYS[13], prio = KEYS[14], tq = KEYS[15], tr = KEYS[16], tn = KEYS[17], ta = KEYS[18]},
          {id = id, how = 'retry', msg = ARGV[3], attempt = ARGV[8], error = ARGV[9], due = due,
           recovered = ARGV[7] == '1'})
return due
