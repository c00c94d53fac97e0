--[[ proc_start: (no process) -> process 'starting', its init input pending (its key was free) or
blocked (behind inputs left from an earlier process of the same id)
KEYS[1] tasks      tasks hash
KEYS[2] pending    pending list
KEYS[3] prio       pending ids of priorities other than the default (includes/priority)
KEYS[4] wake       wake-up list idle workers block on
KEYS[5] events     the queue's event stream
KEYS[6] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[7] blocked    blocked zset: ids waiting behind their key -> when enqueued (ms)
KEYS[8] keyheld    keyheld hash: key -> the id holding it (includes/serial)
KEYS[9] keylist    the process's key's list of waiting ids
KEYS[10] archived  archived zset (a replaced archived task leaves it)
KEYS[11] completed  completed zset (a replaced completed task leaves it)
KEYS[12] proc      proc hash: process id -> record (includes/process)
KEYS[13] procs     procs zset: process id -> last change (ms)
KEYS[14] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[15] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[16] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[17] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] id         the init input's task id (generated)
ARGV[2] msg        the init input's encoded message (key 'proc:<process id>')
ARGV[3] key        'proc:<process id>'
ARGV[4] now        '' = Redis time; else a simulated time in ms
ARGV[5] pid        the process id
ARGV[6] record     the new record (status 'starting'; its times are set here)
Returns 1 = started (init pending), 2 = started (init blocked), 0 = a process with this id exists
(nothing written: start is idempotent). The call sent again after a lost reply finds its own init
input (its generated id) and answers as the first did, 2 while it is blocked, else 1, writing
nothing; once that input has ended and is gone (an init kept with retention is still found), it
answers 0 (issue 42 #7).
]]
--- @include "now"
--- @include "newtask"
--- @include "serial"
--- @include "process"
local mine = redis.call('HGET', KEYS[1], ARGV[1])
if mine then  -- this very call, sent again: its init input is stored (a generated id: none other has it)
  return stored_state(mine) == 'b' and 2 or 1
end
if redis.call('HEXISTS', KEYS[12], ARGV[5]) == 1 then
  return 0
end
local id, msg, key = ARGV[1], ARGV[2], ARGV[3]
local refused = store_new(KEYS[1], id, 'b', msg, false, KEYS[9], 0, KEYS[10], KEYS[11])  -- first write
if refused then
  return refused
end
local now = now_ms(ARGV[4])
local r = rec_unpack(ARGV[6])
r[R_CREATED], r[R_UPDATED] = tostring(now), tostring(now)
redis.call('HSET', KEYS[12], ARGV[5], rec_pack(r))
redis.call('ZADD', KEYS[13], now, ARGV[5])
return key_admit(KEYS[1], KEYS[8], KEYS[7], {KEYS[2], KEYS[3], KEYS[14], KEYS[15], KEYS[16], KEYS[17]}, KEYS[4], KEYS[5], events_cap(KEYS[6]), KEYS[9], key, id,
                 msg, now)
