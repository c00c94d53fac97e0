--[[ rules_push: (event) -> a task string in a list (Resc's make), unless its set already has it
KEYS[1] queue    the list the task string is LPUSHed to
KEYS[2] set      the sorted set guarding it (task -> the time it was queued, in seconds, as Resc
                 writes it; workers remove it as they take the task); the queue key when unguarded
ARGV[1] task     the task string
ARGV[2] guarded  '1' = check and add to the set; '0' = push only
ARGV[3] now      seconds ('' = Redis time)
Returns 1 = pushed, 0 = already in the set (nothing written).
]]
local task = ARGV[1]
if ARGV[2] == '1' then
  if redis.call('ZSCORE', KEYS[2], task) then
    return 0
  end
  local now = tonumber(ARGV[3])
  if not now then
    now = tonumber(redis.call('TIME')[1])
  end
  redis.call('ZADD', KEYS[2], now, task)  -- first: a worker that takes the task finds it in the set
end
redis.call('LPUSH', KEYS[1], task)
return 1
