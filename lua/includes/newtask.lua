--- id_taken(tkey, id): is a *live* task (pending, active, scheduled, retry) stored under this id?
--- A finished one (archived, completed) may be replaced by a new task with the same id.
local function id_taken(tkey, id)
  local old = redis.call('HGET', tkey, id)
  if not old then
    return false
  end
  local st = string.sub(old, 1, 1)
  return st ~= 'x' and st ~= 'c'
end

--- forget_finished(archived, completed, id): a replaced finished task leaves its zset.
local function forget_finished(archived, completed, id)
  redis.call('ZREM', archived, id)
  redis.call('ZREM', completed, id)
end
