--[[ proc_read: (read only) a process's record and a page of its history
KEYS[1] proc       proc hash: process id -> record (includes/process)
KEYS[2] hist       hist hash: '<process id>:<n>' -> event
ARGV[1] pid        the process id
ARGV[2] first      the first event id to return (1-based; an event older than the oldest kept
                   reads from that one); 0 = the last ``count`` events
ARGV[3] count      how many events at most (0 = none)
Returns {} = no such process; else {record, the first event id returned, event, event, ...} (an
event deleted meanwhile is false).
]]
--- @include "process"
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then
  return {}
end
local r = rec_unpack(raw)
local n, first = tonumber(r[R_N]), proc_first(r)
local count = tonumber(ARGV[3])
local from = tonumber(ARGV[2])
if from <= 0 then
  from = n - count + 1
end
from = math.max(from, first)
local out = {raw, from}
local last = math.min(n, from + count - 1)
if last >= from then
  local f = {}
  for i = from, last do
    f[#f + 1] = ARGV[1] .. ':' .. i
  end
  local got = redis.call('HMGET', KEYS[2], unpack(f))
  for _, v in ipairs(got) do
    out[#out + 1] = v
  end
end
return out
