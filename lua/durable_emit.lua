--[[ durable_emit: durable runs' operations (their steps, sleeps, waits, signals and ends) into their
queue's lifecycle event stream (core/durable/events.py), for the inputs of one writer's batch. A
worker pipelines it right after the proc_commit of those inputs, and each input's entries are
written only if its commit happened: the input is completed now (or deleted: an input kept without
retention). A commit refused leaves the input active, or back in pending or retry after a lost
lease: nothing of it is written then, and the input's next run emits its own.
KEY tasks          tasks hash
KEY @events
ARG inputs...      per input: its task id, the number of items that follow for it, then its
                   entries, each its count of items then its field/value pairs
Returns the number of entries written.
]]
--- @include "stored"
--- @include "events"
local cap = events_cap(K.conf)
if cap <= 0 then
  return 0
end
local i, n, written = 1, A.inputs.n, 0
while i <= n do
  local last = i + 1 + tonumber(A.inputs[i + 1])
  local state = stored_state(redis.call('HGET', K.tasks, A.inputs[i]))
  local j = i + 2
  while j <= last and not (state and state ~= 'c') do
    local count = tonumber(A.inputs[j])
    local f = {}
    for k = 1, count do
      f[k] = A.inputs[j + k]
    end
    emit(K.events, cap, unpack(f))
    written = written + 1
    j = j + count + 1
  end
  i = last + 1
end
return written
