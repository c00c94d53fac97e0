--[[ complete: active -> completed
A handler succeeded and the task is kept, with its result, for its retention period.
KEY tasks              tasks hash
KEY lease              lease zset
KEY completed          completed zset: id -> expiry (ms)
KEY lock               uniqueness lock key (placeholder when not unique)
KEY processed          lifetime processed counter
KEY processed_day      today's processed counter
KEY progress           progress hash (the task's entry is cleared)
KEY watch              watch hash: id -> inbox ids of late waiters
KEY reply              the inbox of the client waiting through Client.call (the watch hash when none)
KEY @exit
KEY keylist            the task's key's list (a placeholder when it has no key)
ARG id
ARG token              the lease token
ARG msg                the message rewritten with completed_at and result
ARG retention          milliseconds to keep it
ARG day_ttl            seconds to keep a daily counter
ARG now                '' = Redis time; else a simulated time in ms
ARG payload            the outcome for the waiting client (msgpack [id, 'c', result]), '' = none
ARG attempt            the attempt's number (for the event)
ARG result             the result alone (msgpack; '' = None), for the task's children
ARG key                the task's key ('' = none): released to the next task of the key
Returns 1 = completed (or a string: completed, and the inbox ids of late waiters to notify, with
the token '!' if tasks waiting on it were told), 0 = no such task, -3 = lease not held (write refused).
]]
--- @include "now"
--- @include "active"
--- @include "counters"
--- @include "notify"
--- @include "exit"
local id = A.id
local _, code = claim_active(K.tasks, K.lease, id, A.token, 0, false)
if code ~= 1 then
  return code
end
redis.call('ZREM', K.lease, id)
redis.call('ZADD', K.completed, now_ms(A.now) + tonumber(A.retention), id)
redis.call('HSET', K.tasks, id, 'c' .. A.msg)
bump(K.processed, K.processed_day, tonumber(A.day_ttl))
local told_kids = task_exit({t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, conf = K.conf,
                             children = K.children, outbox = K.outbox, keyheld = K.keyheld, blocked = K.blocked,
                             pending = K.pending, prio = K.prio, wake = K.wake,
                             tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta},
                            {id = id, how = 'completed', msg = A.msg, attempt = A.attempt, result = A.result,
                             lock = K.lock, key = A.key, keylist = K.keylist})
return told(notify(K.watch, K.reply, id, A.payload), told_kids)
