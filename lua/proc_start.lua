--[[ proc_start: (no process) -> process 'starting', its init input pending (its key was free) or
blocked (behind inputs left from an earlier process of the same id)
KEY tasks          tasks hash
KEY @serial
KEY @events
KEY keylist        the process's key's list of waiting ids
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed       completed zset (a replaced completed task leaves it)
KEY proc           proc hash: process id -> record (includes/process)
KEY procs          procs zset: process id -> last change (ms)
ARG id             the init input's task id (generated)
ARG msg            the init input's encoded message (key 'proc:<process id>')
ARG key            'proc:<process id>'
ARG now            '' = Redis time; else a simulated time in ms
ARG pid            the process id
ARG record         the new record (status 'starting'; its times are set here)
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
local mine = redis.call('HGET', K.tasks, A.id)
if mine then  -- this very call, sent again: its init input is stored (a generated id: none other has it)
  return stored_state(mine) == 'b' and 2 or 1
end
if redis.call('HEXISTS', K.proc, A.pid) == 1 then
  return 0
end
local id, msg, key = A.id, A.msg, A.key
local refused = store_new(K.tasks, id, 'b', msg, false, K.keylist, 0, K.archived, K.completed)  -- first write
if refused then
  return refused
end
local now = now_ms(A.now)
local r = rec_unpack(A.record)
r[R_CREATED], r[R_UPDATED] = tostring(now), tostring(now)
redis.call('HSET', K.proc, A.pid, rec_pack(r))
redis.call('ZADD', K.procs, now, A.pid)
return key_admit(K.tasks, K.keyheld, K.blocked, G.pending, K.wake, K.events, events_cap(K.conf), K.keylist, key, id,
                 msg, now)
