--[[ complete: active -> completed
A handler succeeded and the task is kept, with its result, for its retention period.
KEYS[1] tasks          tasks hash
KEYS[2] lease          lease zset
KEYS[3] completed      completed zset: id -> expiry (ms)
KEYS[4] lock           uniqueness lock key (placeholder when not unique)
KEYS[5] processed      lifetime processed counter
KEYS[6] processed_day  today's processed counter
KEYS[7] progress       progress hash (the task's entry is cleared)
KEYS[8] watch          watch hash: id -> inbox ids of late waiters
KEYS[9] reply          the inbox of the client waiting through Client.call (the watch hash when none)
KEYS[10] events         the queue's event stream
KEYS[11] conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[12] children       children hash (includes/flow): the tasks waiting on this one are told
KEYS[13] outbox         the queue's outbox stream (includes/flow)
KEYS[14] keyheld       keyheld hash: key -> the id holding it (includes/serial)
KEYS[15] blocked       blocked zset (tasks waiting behind their key)
KEYS[16] pending       pending list (the key's next task is made pending)
KEYS[17] prio          pending ids of priorities other than the default (includes/priority)
KEYS[18] wake          wake-up list idle workers block on
KEYS[19] keylist       the task's key's list (a placeholder when it has no key)
KEYS[20] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[21] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[22] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[23] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] token          the lease token
ARGV[3] msg            the message rewritten with completed_at and result
ARGV[4] retention      milliseconds to keep it
ARGV[5] day_ttl        seconds to keep a daily counter
ARGV[6] now            '' = Redis time; else a simulated time in ms
ARGV[7] payload        the outcome for the waiting client (msgpack [id, 'c', result]), '' = none
ARGV[8] attempt        the attempt's number (for the event)
ARGV[9] result         the result alone (msgpack; '' = None), for the task's children
ARGV[10] key           the task's key ('' = none): released to the next task of the key
Returns 1 = completed (or a string: completed, and the inbox ids of late waiters to notify, with
the token '!' if tasks waiting on it were told), 0 = no such task, -3 = lease not held (write refused).
]]
--- @include "now"
--- @include "active"
--- @include "counters"
--- @include "notify"
--- @include "exit"
local id = ARGV[1]
local _, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], 0, false)
if code ~= 1 then
  return code
end
redis.call('ZREM', KEYS[2], id)
redis.call('ZADD', KEYS[3], now_ms(ARGV[6]) + tonumber(ARGV[4]), id)
redis.call('HSET', KEYS[1], id, 'c' .. ARGV[3])
bump(KEYS[5], KEYS[6], tonumber(ARGV[5]))
local told_kids = task_exit({t = KEYS[1], lease = KEYS[2], progress = KEYS[7], events = KEYS[10], conf = KEYS[11],
                             children = KEYS[12], outbox = KEYS[13], keyheld = KEYS[14], blocked = KEYS[15],
                             pending = KEYS[16], prio = KEYS[17], wake = KEYS[18],
                             tq = KEYS[20], tr = KEYS[21], tn = KEYS[22], ta = KEYS[23]},
                            {id = id, how = 'completed', msg = ARGV[3], attempt = ARGV[8], result = ARGV[9],
                             lock = KEYS[4], key = ARGV[10], keylist = KEYS[19]})
return told(notify(KEYS[8], KEYS[9], id, ARGV[7]), told_kids)
