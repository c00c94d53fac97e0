--[[ cancel: active -> archived, by an operator; announces it so the worker stops the handler
The rule: a cancelled task is archived (last_error says it was cancelled), never retried on its
own; an operator can run it again from the archive. The caller read the task and passes the lease
token it saw: if the task was finished or re-leased since, nothing is done (-6) and the caller
reads it again. The worker learns of it from the PUBLISH at once (or, if it missed the message,
when its next lease renewal is refused); its late write is refused by the token check. It leaves
as every archived task does (includes/exit): its lock and progress go, the tasks waiting on it
(after=) are told, its key (key=) goes to the key's next task, and a process input's process is
marked error.
KEYS[1] tasks      tasks hash
KEYS[2] lease      lease zset
KEYS[3] archived   archived zset: id -> time archived (ms)
KEYS[4] lock       uniqueness lock key (the queue's placeholder when not unique)
KEYS[5] progress   progress hash (the task's progress is cleared)
KEYS[6] events     the queue's event stream
KEYS[7] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[8] children   children hash (includes/flow): the tasks waiting on this one are told
KEYS[9] outbox     the queue's outbox stream (includes/flow)
KEYS[10] keyheld   keyheld hash: key -> the id holding it (includes/serial)
KEYS[11] blocked   blocked zset (tasks waiting behind their key)
KEYS[12] pending   pending list (the key's next task is made pending)
KEYS[13] prio      pending ids of priorities other than the default (includes/priority)
KEYS[14] wake      wake-up list idle workers block on
KEYS[15] keylist   the task's key's list (a placeholder when it has no key)
KEYS[16] proc      proc hash (includes/process): a process input's process is marked error
KEYS[17] procs     procs zset: process id -> last change (ms)
KEYS[18] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[19] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[20] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[21] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id
ARGV[2] token      the lease token the caller read
ARGV[3] msg        the message rewritten with last_error and its time
ARGV[4] now        '' = Redis time; else a simulated time in ms
ARGV[5] channel    pub/sub channel workers listen on (a channel, not a key)
ARGV[6] notice     what is published (the queue and the id)
ARGV[7] key        the task's key ('' = none)
ARGV[8] pid        a process input: its process id ('' = none)
ARGV[9] kind       that input's kind (init, call, timeout, repair, remove)
Returns 1 = cancelled ('!' when tasks waiting on it were told), 0 = no such task, -5 = not active,
-6 = re-leased or changed since read.
]]
--- @include "now"
--- @include "stored"
--- @include "exit"
--- @include "process"
--- @include "operator"
operator_only(KEYS[1])  -- an operator's: a producer is refused here, before any write
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v then
  return 0
end
if stored_state(v) ~= 'a' then
  return -5
end
if stored_token(v) ~= ARGV[2] then
  return -6
end
local now = now_ms(ARGV[4])
redis.call('ZREM', KEYS[2], id)
redis.call('ZADD', KEYS[3], now, id)
redis.call('HSET', KEYS[1], id, 'x' .. ARGV[3])
local told_children = task_exit({t = KEYS[1], lease = KEYS[2], progress = KEYS[5], events = KEYS[6], conf = KEYS[7],
                                 children = KEYS[8], outbox = KEYS[9], keyheld = KEYS[10], blocked = KEYS[11],
                                 pending = KEYS[12], prio = KEYS[13], wake = KEYS[14], proc = KEYS[16],
                                 tq = KEYS[18], tr = KEYS[19], tn = KEYS[20], ta = KEYS[21],
                                 procs = KEYS[17], now = now, mark_process = proc_mark_error},
                                {id = id, how = 'cancelled', msg = ARGV[3], lock = KEYS[4], key = ARGV[7],
                                 keylist = KEYS[15], pid = ARGV[8], kind = ARGV[9], mark = 'cancelled by an operator'})
redis.call('PUBLISH', ARGV[5], ARGV[6])
return told(1, told_children)
