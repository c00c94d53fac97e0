--[[ cancel: active -> archived, by an operator; announces it so the worker stops the handler
The rule: a cancelled task is archived (last_error says it was cancelled), never retried on its
own; an operator can run it again from the archive. The caller read the task and passes the lease
token it saw: if the task was finished or re-leased since, nothing is done (-6) and the caller
reads it again. The worker learns of it from the PUBLISH at once (or, if it missed the message,
when its next lease renewal is refused); its late write is refused by the token check. It leaves
as every archived task does (includes/exit): its lock and progress go, the tasks waiting on it
(after=) are told, its key (key=) goes to the key's next task, and a process input's process is
marked error.
KEY tasks          tasks hash
KEY lease          lease zset
KEY archived       archived zset: id -> time archived (ms)
KEY lock           uniqueness lock key (the queue's placeholder when not unique)
KEY progress       progress hash (the task's progress is cleared)
KEY @exit
KEY keylist        the task's key's list (a placeholder when it has no key)
KEY proc           proc hash (includes/process): a process input's process is marked error
KEY procs          procs zset: process id -> last change (ms)
ARG id
ARG token          the lease token the caller read
ARG msg            the message rewritten with last_error and its time
ARG now            '' = Redis time; else a simulated time in ms
ARG channel        pub/sub channel workers listen on (a channel, not a key)
ARG notice         what is published (the queue and the id)
ARG key            the task's key ('' = none)
ARG pid            a process input: its process id ('' = none)
ARG kind           that input's kind (init, call, timeout, repair, remove)
Returns 1 = cancelled ('!' when tasks waiting on it were told), 0 = no such task, -5 = not active,
-6 = re-leased or changed since read.
]]
--- @include "now"
--- @include "stored"
--- @include "exit"
--- @include "process"
--- @include "operator"
operator_only(K.tasks)  -- an operator's: a producer is refused here, before any write
local id = A.id
local v = redis.call('HGET', K.tasks, id)
if not v then
  return 0
end
if stored_state(v) ~= 'a' then
  return -5
end
if stored_token(v) ~= A.token then
  return -6
end
local now = now_ms(A.now)
redis.call('ZREM', K.lease, id)
redis.call('ZADD', K.archived, now, id)
redis.call('HSET', K.tasks, id, 'x' .. A.msg)
local told_children = task_exit({t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, conf = K.conf,
                                 children = K.children, outbox = K.outbox, keyheld = K.keyheld, blocked = K.blocked,
                                 pending = K.pending, prio = K.prio, wake = K.wake, proc = K.proc,
                                 tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta,
                                 procs = K.procs, now = now, mark_process = proc_mark_error},
                                {id = id, how = 'cancelled', msg = A.msg, lock = K.lock, key = A.key,
                                 keylist = K.keylist, pid = A.pid, kind = A.kind, mark = 'cancelled by an operator'})
redis.call('PUBLISH', A.channel, A.notice)
return told(1, told_children)
