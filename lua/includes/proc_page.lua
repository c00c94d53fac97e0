--- proc_page(hist, pid, raw, from, count, known): a process's read (lua/proc_read.lua's reply for one
--- process): {raw (its record), the first event id returned, event, event, ...}. ``from``: the first
--- event id asked for (0 or less: the last ``count`` events; never older than the oldest kept);
--- ``known``: the newest event the caller holds (0 = none): when it is within the page, the events
--- are returned from that one on. One HMGET of the history for the page (an event deleted
--- meanwhile is false). Used by proc_read.lua and by the dequeue's process reads (dq_procs).
--- @include "process"
local function proc_page(hist, pid, raw, from, count, known)
  local r = rec_unpack(raw)
  local n = tonumber(r[R_N])
  if from <= 0 then
    from = n - count + 1
  end
  from = math.max(from, proc_first(r))
  if known > from and known <= n then
    from = known
  end
  local one = {raw, from}
  local last = math.min(n, from + count - 1)
  if last >= from then
    local f = {}
    for i = from, last do
      f[#f + 1] = pid .. ':' .. i
    end
    local got = redis.call('HMGET', hist, unpack(f))
    for i = 1, #got do
      one[i + 2] = got[i]
    end
  end
  return one
end
