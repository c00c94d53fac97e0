--- slot_freed(conf, lease, pk, wake, limit): call after a task left active (its entry removed
--- from the lease zset). In a queue with a concurrency limit (conf field 'concurrency'), a dequeue
--- held back by the limit leaves no wake-up token (lua/dequeue.lua), so the workers it held
--- back sleep until a slot frees: the script that frees one leaves one token if the queue is now
--- below its limit and has pending tasks (the worker it wakes takes a task and, if tasks and slots
--- remain, wakes the next). A queue with no concurrency limit pays one HGET. ``limit``: the limit
--- if the caller read it (nil: read here). Returns the limit (false: none) and whether it woke one.
--- @include "signal"
--- @include "priority"
local function slot_freed(conf, lease, pk, wake, limit)
  limit = limit or tonumber(redis.call('HGET', conf, 'concurrency')) or false
  if limit and redis.call('ZCARD', lease) < limit and pending_count(pk) > 0 then
    signal(wake)
    return limit, true
  end
  return limit, false
end
