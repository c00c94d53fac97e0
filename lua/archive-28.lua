--[[ archive: active -> archived
A handler failed for the last time (retries exhausted, SkipRetry, a malformed message, or a lease
that expired on the last try): the task goes to the archive (dead letters), its uniqueness lock is
released, and the archive is trimmed to its size and age limits, trimmed tasks' data included.
KEYS[1] tasks          tasks hash
KEYS[2] lease          lease zset
KEYS[3] archived       archived zset: id -> time archived (ms)
KEYS[4] lock           uniqueness lock key (placeholder when not unique)
KEYS[5] processed      lifetime processed counter
KEYS[6] processed_day  today's processed counter
KEYS[7] failed         lifetime failed counter
KEYS[8] failed_day     today's failed counter
KEYS[9] trimmed        lifetime count of archived tasks deleted by the limits
KEYS[10] progress       progress hash (the task's entry is cleared)
KEYS[11] watch          watch hash: id -> inbox ids of late waiters
KEYS[12] reply          the inbox of the client waiting through Client.call (the watch hash when none)
KEYS[13] events         the queue's event stream
KEYS[14] conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[15] children       children hash (includes/flow): the tasks waiting on this one are told
KEYS[16] outbox         the queue's outbox stream (includes/flow)
KEYS[17] keyheld       keyheld hash: key -> the id holding it (includes/serial)
KEYS[18] blocked       blocked zset (tasks waiting behind their key)
KEYS[19] pending       pending list (the key's next task is made pending)
KEYS[20] prio          pending ids of priorities other than the default (includes/priority)
KEYS[21] wake          wake-up list idle workers block on
KEYS[22] keylist       the task's key's list (a placeholder when it has no key)
KEYS[23] proc          proc hash (includes/process): a process input's process is marked error
KEYS[24] procs         procs zset: process id -> last change (ms)
KEYS[25] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[26] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[27] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[28] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] token          the lease token of the run being finished (the worker's, or the one the
                       recoverer read with the expired lease)
ARGV[3] msg            the message rewritten with the error and its time
ARGV[4] max_size       archive size limit (tasks)
ARGV[5] max_age        archive age limit (ms)
ARGV[6] day_ttl        seconds to keep a daily counter
ARGV[7] now            '' = Redis time; else a simulated time in ms
ARGV[8] recover        '1' = the recoverer calls: the lease must also have expired; else '0'
ARGV[9] payload        the outcome for the waiting client (msgpack [id, 'x', error]), '' = none
ARGV[10] attempt       the failed attempt's number (for the events)
ARGV[11] error         its error (for the events)
ARGV[12] key           the task's key ('' = none): released to the next task of the key
ARGV[13] pid           a process input: its process id, marked error, broken by this input ('' = none),
                       unless the process would have skipped or refused it (see proc_mark_error)
ARGV[14] kind          that input's kind (init, call, timeout, repair, remove)
Returns 1 = archived (or a string: archived, and the inbox ids of late waiters to notify, with the
token '!' if tasks waiting on it were told), 0 = no such task, -3 = lease not held (another run, or not active),
-4 = (recoverer) lease still alive.
]]
--- @include "now"
--- @include "active"
--- @include "counters"
--- @include "trim"
--- @include "notify"
--- @include "exit"
--- @include "process"
local id = ARGV[1]
local now = now_ms(ARGV[7])
local _, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], now, ARGV[8] == '1')
if code ~= 1 then
  return code
end
redis.call('ZREM', KEYS[2], id)
redis.call('ZADD', KEYS[3], now, id)
redis.call('HSET', KEYS[1], id, 'x' .. ARGV[3])
local day_ttl = tonumber(ARGV[6])
bump(KEYS[5], KEYS[6], day_ttl)
bump(KEYS[7], KEYS[8], day_ttl)
trim_archive(KEYS[3], KEYS[1], KEYS[9], now, tonumber(ARGV[4]), tonumber(ARGV[5]))
local told_kids = task_exit({t = KEYS[1], lease = KEYS[2], progress = KEYS[10], events = KEYS[13], conf = KEYS[14],
                             children = KEYS[15], outbox = KEYS[16], keyheld = KEYS[17], blocked = KEYS[18],
                             pending = KEYS[19], prio = KEYS[20], wake = KEYS[21], proc = KEYS[23],
                             tq = KEYS[25], tr = KEYS[26], tn = KEYS[27], ta = KEYS[28],
                             procs = KEYS[24], now = now, mark_process = proc_mark_error},
                            {id = id, how = 'archived', msg = ARGV[3], attempt = ARGV[10], error = ARGV[11],
                             recovered = ARGV[8] == '1', lock = KEYS[4], key = ARGV[12], keylist = KEYS[22],
                             pid = ARGV[13], kind = ARGV[14]})
return told(notify(KEYS[11], KEYS[12], id, ARGV[9]), told_kids)
