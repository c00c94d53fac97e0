--[[ schedule: (new) -> scheduled
Stores a task to become pending after a delay measured on the Redis server's clock, so a client
whose clock is off cannot make it run early. Same id rules as enqueue.
KEYS[1] tasks      tasks hash
KEYS[2] scheduled  scheduled zset: id -> due time (ms)
KEYS[3] tick       wake-up list forwarders block on (signalled when the earliest due time moves up)
KEYS[4] lock       uniqueness lock key (placeholder when not unique)
KEYS[5] archived   archived zset
KEYS[6] completed  completed zset
KEYS[7] events     the queue's event stream
KEYS[8] conf       the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[9] children   children hash (includes/flow): the tasks waiting on a replaced task are told
                   it was deleted (includes/exit), as when an operator deletes it
KEYS[10] outbox    the queue's outbox stream (includes/flow)
ARGV[1] id         task id
ARGV[2] msg        encoded message
ARGV[3] unique     uniqueness TTL in seconds, counted from the due time; 0 = not unique
ARGV[4] delay      milliseconds from now until due (> 0)
ARGV[5] now        '' = Redis time; else a simulated time in ms (tests)
ARGV[6] check      '1' = the caller chose the id: check it; '0' = a generated (random) id
ARGV[7] mode       '' = unique or throttled (ARGV[3] > 0) or neither; 'd' = debounce: if the task
                   holding the lock is still scheduled, it is deleted and this one takes its
                   place (and the lock); if it has started (or is waiting to), this one is
                   scheduled beside it and takes the lock over
Returns the due time in ms (> 0) = scheduled, {-1, holder id, ms left} = duplicate, -2 = a live
task has this id; in debounce mode {due, id of the task replaced or ''}.
]]
--- @include "now"
--- @include "signal"
--- @include "newtask"
--- @include "events"
--- @include "unique"
--- @include "stored"
--- @include "exit"
local id, debounce = ARGV[1], ARGV[7] == 'd'
local seen = new_id(KEYS[1], id, ARGV[2], ARGV[6] == '1')
if seen == 'own' then
  local due = tonumber(redis.call('ZSCORE', KEYS[2], id)) or now_ms(ARGV[5])
  if debounce then
    return {due, ''}  -- (what it replaced the first time is not known any more)
  end
  return due
elseif seen == 'taken' then
  return -2
end
local delay = tonumber(ARGV[4])
local ttl = tonumber(ARGV[3])
local replaced, replaced_msg = '', ''
if debounce then
  local holder = redis.call('GET', KEYS[4])
  if holder and holder ~= id then
    local v = redis.call('HGET', KEYS[1], holder)
    if stored_state(v) == 's' then  -- not started: the new task replaces it (below)
      replaced, replaced_msg = holder, stored_msg(v)
    end
  end
  redis.call('SET', KEYS[4], id, 'EX', ttl + math.ceil(delay / 1000))  -- first write: a full Redis refuses here
elseif ttl > 0 then
  local refused = take_lock(KEYS[4], id, ttl + math.ceil(delay / 1000))
  if refused then
    return refused
  end
end
local due = now_ms(ARGV[5]) + delay
redis.call('HSET', KEYS[1], id, 's' .. ARGV[2])  -- the first write (but the debounce SET): a full Redis refuses here
local cap = events_cap(KEYS[8])
if replaced ~= '' then  -- deleted only once the new task is stored
  redis.call('HDEL', KEYS[1], replaced)
  redis.call('ZREM', KEYS[2], replaced)
  -- its lock is taken over by the new task (above); it has no key (debounce refuses key=)
  task_exit({t = KEYS[1], events = KEYS[7], cap = cap, children = KEYS[9], outbox = KEYS[10]},
            {id = replaced, how = 'debounced', msg = replaced_msg, more = {'by', id}})
end
if seen == 'replace' then
  forget_finished(KEYS[5], KEYS[6], id)
end
signal_if_first(KEYS[2], due, KEYS[3])
redis.call('ZADD', KEYS[2], due, id)
emit_task(KEYS[7], cap, msg_tenant(ARGV[2], 1), 'e', 'scheduled', 'id', id, 'type', msg_type(ARGV[2]), 'due', due)
if debounce then
  return {due, replaced}
end
return due
