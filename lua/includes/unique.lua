--- release_lock(lock, id): drop a uniqueness lock, but only while this task still owns it.
local function release_lock(lock, id)
  if redis.call('GET', lock) == id then
    redis.call('DEL', lock)
  end
end
