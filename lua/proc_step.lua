--[[ proc_step: durable runs' checkpoints inside their inputs (docs/internals-durable.md
"Checkpoints"): for each input, the events it appended so far (a step's result, the values it
recorded) are written, and the input goes on, still holding its lease and its process's key. The
record keeps its status, state and timer (a crash after this leaves an input that runs again from
the record as written here: an init stays 'starting', a timer input stays the record's timer); only
its event count and 'updated' change (the worker sends the record's items around 'updated', so the
script writes the record without parsing it). The input later ends with proc_commit (or checkpoints again),
which checks the record written here. A worker sends the checkpoints of its runs that reached one
together (one call per queue per batch); each item is checked and written on its own.
KEY tasks          tasks hash
KEY lease          lease zset
KEY proc           proc hash: process id -> record (includes/process)
KEY procs          procs zset: process id -> last change (ms)
KEY hist           hist hash: '<process id>:<n>' -> event
KEY extra...       the processes' key lists (the inputs waiting behind each running one), named by
                   index j from ARGV: K.extra[j]
ARG now            '' = Redis time; else a simulated time in ms
ARG items... {id token pid expect head tail events keylist}  one item per input:
        id         the running input's task id
        token      its lease token
        pid        the process id
        expect     the record as the worker holds it (its stored bytes)
        head       the new record's items before 'updated' (rec_pack; its count: the events appended)
        tail       ... and after it (the record is written as head, 'updated' = now, tail)
        events     rec_pack of (hist field, entry but its time) pairs (as proc_commit's new_events)
        keylist    index j of the process key's list in K.extra[j]
Returns one reply per item, {code, record, waiting}: code 1 = written (record: the record as stored
now; waiting: how many inputs wait behind the key, the worker ends the input when some do), 0 = no
such task, -3 = lease not held, -8 = the process changed since it was read (nothing written).
]]
--- @include "now"
--- @include "active"
--- @include "process"
local now = tostring(now_ms(A.now))
local at = #now .. ':' .. now
local out = {}
for i = 1, A.items.n do
  local it = A.items[i]
  local _, code = claim_active(K.tasks, K.lease, it.id, it.token, 0, false)
  local raw = code == 1 and redis.call('HGET', K.proc, it.pid)
  if code ~= 1 then
    out[i] = {code, '', 0}
  elseif raw ~= it.expect then
    out[i] = {-8, '', 0}
  else
    if it.events ~= '' then
      local fv = rec_unpack(it.events)
      for j = 2, #fv, 2 do
        fv[j] = at .. fv[j]
      end
      for j = 1, #fv, 1000 do  -- (in chunks: Lua's unpack has a stack limit)
        redis.call('HSET', K.hist, unpack(fv, j, math.min(#fv, j + 999)))
      end
    end
    raw = it.head .. at .. it.tail
    redis.call('HSET', K.proc, it.pid, raw)
    redis.call('ZADD', K.procs, tonumber(now), it.pid)
    out[i] = {1, raw, redis.call('LLEN', K.extra[tonumber(it.keylist)])}
  end
end
return out
