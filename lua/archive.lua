--[[ archive: active -> archived
A handler failed for the last time (retries exhausted, SkipRetry, a malformed message, or a lease
that expired on the last try): the task goes to the archive (dead letters), its uniqueness lock is
released, and the archive is trimmed to its size and age limits, trimmed tasks' data included.
KEY tasks              tasks hash
KEY lease              lease zset
KEY archived           archived zset: id -> time archived (ms)
KEY lock               uniqueness lock key (placeholder when not unique)
KEY processed          lifetime processed counter
KEY processed_day      today's processed counter
KEY failed             lifetime failed counter
KEY failed_day         today's failed counter
KEY trimmed            lifetime count of archived tasks deleted by the limits
KEY progress            progress hash (the task's entry is cleared)
KEY watch               watch hash: id -> inbox ids of late waiters
KEY pwatch              pwatch hash: process id -> inbox ids of clients waiting for it (proc_watch)
KEY reply               the inbox of the client waiting through Client.call (the watch hash when none)
KEY @exit
KEY keylist            the task's key's list (a placeholder when it has no key)
KEY proc               proc hash (includes/process): a process input's process is marked error
KEY procs              procs zset: process id -> last change (ms)
ARG id
ARG token              the lease token of the run being finished (the worker's, or the one the
                       recoverer read with the expired lease)
ARG msg                the message rewritten with the error and its time
ARG max_size           archive size limit (tasks)
ARG max_age            archive age limit (ms)
ARG day_ttl            seconds to keep a daily counter
ARG now                '' = Redis time; else a simulated time in ms
ARG recover            '1' = the recoverer calls: the lease must also have expired; else '0'
ARG payload            the outcome for the waiting client (msgpack [id, 'x', error]), '' = none
ARG attempt            the failed attempt's number (for the events)
ARG error              its error (for the events)
ARG key                the task's key ('' = none): released to the next task of the key
ARG pid                a process input: its process id, marked error, broken by this input ('' = none),
                       unless the process would have skipped or refused it (see proc_mark_error)
ARG kind               that input's kind (init, call, timeout, repair, remove)
Returns 1 = archived (or a string: archived, and the inbox ids of late waiters to notify, with the
token '!' if tasks waiting on it were told, and '@' + the inbox id of each client waiting for the
process ``pid``: includes/waiter woken), 0 = no such task, -3 = lease not held (another run, or not active),
-4 = (recoverer) lease still alive.
]]
--- @include "now"
--- @include "active"
--- @include "counters"
--- @include "trim"
--- @include "notify"
--- @include "exit"
--- @include "process"
--- @include "waiter"
local id = A.id
local now = now_ms(A.now)
local _, code = claim_active(K.tasks, K.lease, id, A.token, now, A.recover == '1')
if code ~= 1 then
  return code
end
redis.call('ZREM', K.lease, id)
redis.call('ZADD', K.archived, now, id)
redis.call('HSET', K.tasks, id, 'x' .. A.msg)
local day_ttl = tonumber(A.day_ttl)
bump(K.processed, K.processed_day, day_ttl)
bump(K.failed, K.failed_day, day_ttl)
trim_archive(K.archived, K.tasks, K.trimmed, now, tonumber(A.max_size), tonumber(A.max_age))
local told_kids = task_exit({t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, conf = K.conf,
                             children = K.children, outbox = K.outbox, keyheld = K.keyheld, blocked = K.blocked,
                             pending = K.pending, prio = K.prio, wake = K.wake, proc = K.proc,
                             tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta,
                             procs = K.procs, now = now, mark_process = proc_mark_error},
                            {id = id, how = 'archived', msg = A.msg, attempt = A.attempt, error = A.error,
                             recovered = A.recover == '1', lock = K.lock, key = A.key, keylist = K.keylist,
                             pid = A.pid, kind = A.kind})
local out = told(notify(K.watch, K.reply, id, A.payload), told_kids)
return A.pid ~= '' and woken(K.pwatch, A.pid, out) or out
