--[[ snooze: active -> scheduled, not a failure
A handler raised RateLimited(retry_in): the task waits retry_in (a quota it depends on is spent),
then runs again. Its retry count and last error are untouched and nothing is counted: no failure,
no retry used up.
KEYS[1] tasks      tasks hash
KEYS[2] lease      lease zset
KEYS[3] scheduled  scheduled zset
KEYS[4] tick       forwarders' tick list (signalled when the task is the earliest due)
KEYS[5] progress   progress hash (the attempt's progress is cleared)
KEYS[6] events     the queue's event stream
KEYS[7] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[8] wake  wake-up list idle workers block on (a slot freed in a limited queue wakes one: includes/exit)
KEYS[9] pending  pending list (counted for that wake)
KEYS[10] prio  pending ids of priorities other than the default (counted too)
KEYS[11] tq  the queue's tenant zset (counted too; includes/priority)
KEYS[12] tr  the queue's ready ring of tenants
KEYS[13] tn  the queue's tenant hash
KEYS[14] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] token      the lease token the task was dequeued with
ARGV[3] delay      ms to wait (capped by the caller)
ARGV[4] now        '' = Redis time; else a simulated time in ms
Returns the due time (ms) = snoozed, 0 = no such task, -3 = the caller no longer holds the lease.
]]
--- @include "now"
--- @include "active"
--- @include "signal"
--- @include "exit"
local id = ARGV[1]
local msg, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], 0, false)
if code ~= 1 then
  return code
end
local due = now_ms(ARGV[4]) + tonumber(ARGV[3])
redis.call('ZREM', KEYS[2], id)  -- first write, a removal: works on a full Redis
redis.call('HSET', KEYS[1], id, 's' .. msg)
signal_if_first(KEYS[3], due, KEYS[4])
redis.call('ZADD', KEYS[3], due, id)
-- not an end: its lock, key and children stay with it
task_exit({t = KEYS[1], lease = KEYS[2], progress = KEYS[5], events = KEYS[6], conf = KEYS[7],
          wake = KEYS[8], pending = KEYS[9], prio = KEYS[10], tq = KEYS[11], tr = KEYS[12], tn = KEYS[13], ta = KEYS[14]},
          {id = id, how = 'snoozed', msg = msg, due = due, error = 'rate limited'})
return due
