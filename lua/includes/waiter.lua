--- A client waiting on something: its inbox id added to a hash's field (space-separated inbox ids).
--- add_waiter(hash, field, inbox): adds ``inbox`` to ``field`` once (watch: a task's late waiters;
--- proc_watch: a process's). The script that ends the wait reads the field, deletes it and hands
--- the inboxes to the worker, which pushes to each (reply). woken(hash, field, out): the waiters of
--- ``field`` (a process's: archive) added to a finishing script's reply ``out`` (1, or a string of
--- words) as '@' + inbox id each, their entry deleted (proc_commit does it for a batch at once).
local function add_waiter(hash, field, inbox)
  local have = redis.call('HGET', hash, field)
  if not have then
    redis.call('HSET', hash, field, inbox)
  elseif not string.find(' ' .. have .. ' ', ' ' .. inbox .. ' ', 1, true) then
    redis.call('HSET', hash, field, have .. ' ' .. inbox)
  end
end
local function woken(hash, field, out)
  local waiting = redis.call('HGET', hash, field)
  if not waiting then
    return out
  end
  redis.call('HDEL', hash, field)
  local marks = (string.gsub(waiting, '(%S+)', '@%1'))
  return type(out) == 'string' and out .. ' ' .. marks or marks
end
