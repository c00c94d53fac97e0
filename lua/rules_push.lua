--[[ rules_push: (event) -> a task string in a list (Resc's make), unless its set already has it
KEY queue        the list the task string is LPUSHed to
KEY set          the sorted set guarding it (task -> the time it was queued, in seconds, as Resc
                 writes it; workers remove it as they take the task); the queue key when unguarded
ARG task         the task string
ARG guarded      '1' = check and add to the set; '0' = push only
ARG now          seconds ('' = Redis time)
Returns 1 = pushed, 0 = already in the set (nothing written).
]]
local task = A.task
if A.guarded == '1' then
  if redis.call('ZSCORE', K.set, task) then
    return 0
  end
  local now = tonumber(A.now)
  if not now then
    now = tonumber(redis.call('TIME')[1])
  end
  redis.call('ZADD', K.set, now, task)  -- first: a worker that takes the task finds it in the set
end
redis.call('LPUSH', K.queue, task)
return 1
