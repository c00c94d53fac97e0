--[[ durable_emit: a durable run's operations (its steps, sleeps, waits, signals and end) into its
queue's lifecycle event stream (core/durable/events.py). A worker pipelines it right after the
proc_commit of the input that recorded them, and it writes only if that commit happened: the input
is completed now (or deleted: an input kept without retention). A commit refused leaves the input
active, or back in pending or retry after a lost lease: nothing is written then, and the input's
next run emits its own.
KEY tasks          tasks hash
KEY @events
ARG id             the input task's id
ARG fields...      the entries, each its count of items then its field/value pairs
Returns the number of entries written.
]]
--- @include "stored"
--- @include "events"
local state = stored_state(redis.call('HGET', K.tasks, A.id))
if state and state ~= 'c' then
  return 0
end
local cap = events_cap(K.conf)
if cap <= 0 then
  return 0
end
local i, n, written = 1, A.fields.n, 0
while i <= n do
  local count = tonumber(A.fields[i])
  local f = {}
  for j = 1, count do
    f[j] = A.fields[i + j]
  end
  emit(K.events, cap, unpack(f))
  written = written + 1
  i = i + count + 1
end
return written
