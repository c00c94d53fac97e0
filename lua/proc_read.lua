--[[ proc_read: (read only) processes' records and a page of each one's history: one process (the
Inspector's page) or the processes of the inputs a worker dequeued together (one call per queue
per batch)
KEY proc           proc hash: process id -> record (includes/process)
KEY hist           hist hash: '<process id>:<n>' -> event
ARG first          the first event id to return (1-based; an event older than the oldest kept
                   reads from that one); 0 = the last ``count`` events
ARG count          how many events at most (0 = none)
ARG items... {pid known}  per process: its id, and the newest event the caller holds (0 = none): when it
                   is within the page, the events are returned from that one on (the caller holds
                   those before it; it checks that one is the event it holds)
Returns one reply per process, in order: {} = no such process; else {record, the first event id
returned, event, event, ...} (an event deleted meanwhile is false).
]]
--- @include "proc_page"
local count, from0 = tonumber(A.count), tonumber(A.first)
local pids, known = {}, {}
for i = 1, A.items.n do
  local it = A.items[i]
  pids[i], known[i] = it.pid, tonumber(it.known)
end
local raws = {}
for i = 1, #pids, 1000 do  -- (in chunks: Lua's unpack has a stack limit)
  local got = redis.call('HMGET', K.proc, unpack(pids, i, math.min(#pids, i + 999)))
  for j = 1, #got do
    raws[i + j - 1] = got[j]
  end
end
local out = {}
for k, pid in ipairs(pids) do
  local raw = raws[k]
  out[k] = raw and proc_page(K.hist, pid, raw, from0, count, known[k]) or {}
end
return out
