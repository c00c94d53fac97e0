--[[ drop_queue: an empty queue -> (removed): deletes the queue's keys
The caller emptied the queue first (in bounded batches) or found it empty; this refuses if any
task is left (one may have arrived meanwhile). UNLINK frees memory off the main thread. The queue's
name leaves the global queue set in a separate command (another cluster slot); its daily counters
expire on their own.
KEYS[1] pending
KEYS[2] lease
KEYS[3] scheduled
KEYS[4] retry
KEYS[5] archived
KEYS[6] completed
KEYS[7] tasks
KEYS[8] paused
KEYS[9] wake
KEYS[10] tick
KEYS[11] processed
KEYS[12] failed
KEYS[13] trimmed
KEYS[14] watch
KEYS[15] progress
KEYS[16] events
KEYS[17] conf
KEYS[18] aggregating   the counter of tasks in groups
KEYS[19] groups
KEYS[20] groups_first
KEYS[21] groups_size
KEYS[22] prio          pending ids of priorities other than the default
KEYS[23] targeted
KEYS[24] runs
KEYS[25] targeted_any  the index of targeted tasks any worker may run ('m:*')
KEYS[26] waiting       (KEYS[26..29]: workflows, includes/flow: the children of this queue's tasks
KEYS[27] deps           in other queues are not told; drop a workflow's queues leaves first)
KEYS[28] children
KEYS[29] outbox
KEYS[30] blocked       (KEYS[30..31]: keyed tasks, includes/serial; the caller deletes the lists of
KEYS[31] keyheld        the keys held first)
KEYS[32] proc          (KEYS[32..34]: durable processes, includes/process)
KEYS[33] procs
KEYS[34] hist
KEYS[35] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[36] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[37] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[38] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] force  '1' = the queue's processes are deleted with it; else a process left counts as a task
Returns 1 = removed, -7 = not empty (nothing deleted). A pending list holding only placeholders
of removed tasks ('') counts as empty (up to 1000 of them are looked at).
]]
--- @include "operator"
operator_only(KEYS[1])  -- an operator's: a producer is refused here, before any write
local left = redis.call('LLEN', KEYS[1])
if left > 0 and left <= 1000 then
  for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
    if id == '' then
      left = left - 1
    end
  end
end
for _, i in ipairs({2, 3, 4, 5, 6, 22, 23, 26, 30, 35}) do
  left = left + redis.call('ZCARD', KEYS[i])
end
left = left + tonumber(redis.call('GET', KEYS[18]) or '0') + redis.call('ZCARD', KEYS[19])
if ARGV[1] ~= '1' then
  left = left + redis.call('HLEN', KEYS[32])
end
if left > 0 then
  return -7
end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9],
  KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18], KEYS[19], KEYS[20],
  KEYS[21], KEYS[22], KEYS[23], KEYS[24], KEYS[25], KEYS[26], KEYS[27], KEYS[28], KEYS[29], KEYS[30], KEYS[31],
  KEYS[32], KEYS[33], KEYS[34], KEYS[35], KEYS[36], KEYS[37])
return 1
