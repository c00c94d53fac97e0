--[[ drop_queue: an empty queue -> (removed): deletes the queue's keys
The caller emptied the queue first (in bounded batches) or found it empty; this refuses if any
task is left (one may have arrived meanwhile). UNLINK frees memory off the main thread. The queue's
name leaves the global queue set in a separate command (another cluster slot); its daily counters
expire on their own.
KEY @exit
KEY lease
KEY scheduled
KEY retry
KEY archived
KEY completed
KEY tasks
KEY paused
KEY tick
KEY processed
KEY failed
KEY trimmed
KEY watch
KEY pwatch             (clients waiting for a durable run: lua/proc_watch)
KEY progress
KEY aggregating        the counter of tasks in groups
KEY groups
KEY groups_first
KEY groups_size
KEY targeted
KEY runs
KEY targeted_any       the index of targeted tasks any worker may run ('m:*')
KEY waiting            (waiting, deps, and @exit's children, outbox: workflows, includes/flow: the children of this queue's tasks
KEY deps                in other queues are not told; drop a workflow's queues leaves first)
KEY proc               (proc, procs, hist: durable processes, includes/process)
KEY procs
KEY hist
KEY tw       the queue's tenants held by their rate: tenant -> ms its next task conforms (includes/priority)
ARG force      '1' = the queue's processes are deleted with it; else a process left counts as a task
Returns 1 = removed, -7 = not empty (nothing deleted). A pending list holding only placeholders
of removed tasks ('') counts as empty (up to 1000 of them are looked at).
]]
--- @include "operator"
operator_only(K.pending)  -- an operator's: a producer is refused here, before any write
local left = redis.call('LLEN', K.pending)
if left > 0 and left <= 1000 then
  for _, id in ipairs(redis.call('LRANGE', K.pending, 0, -1)) do
    if id == '' then
      left = left - 1
    end
  end
end
for _, zset in ipairs({K.lease, K.scheduled, K.retry, K.archived, K.completed, K.prio, K.targeted, K.waiting,
                       K.blocked, K.tq}) do
  left = left + redis.call('ZCARD', zset)
end
left = left + tonumber(redis.call('GET', K.aggregating) or '0') + redis.call('ZCARD', K.groups)
if A.force ~= '1' then
  left = left + redis.call('HLEN', K.proc)
end
if left > 0 then
  return -7
end
local keys = {}  -- every key its header names
for _, key in pairs(K) do
  keys[#keys + 1] = key
end
redis.call('UNLINK', unpack(keys))
return 1
