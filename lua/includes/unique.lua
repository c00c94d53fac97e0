--- release_lock(lock, id): drop a uniqueness lock, but only while this task still owns it.
local function release_lock(lock, id)
  if redis.call('GET', lock) == id then
    redis.call('DEL', lock)
  end
end
--- take_lock(lock, id, ttl): take a uniqueness (or throttle) lock for ``ttl`` seconds (0 = no
--- lock: nothing to do). Returns nil when taken, else the refusal {-1, holder id, ms left}.
local function take_lock(lock, id, ttl)
  if ttl > 0 and not redis.call('SET', lock, id, 'NX', 'EX', ttl) then
    return {-1, redis.call('GET', lock) or '', redis.call('PTTL', lock)}
  end
  return nil
end
