--[[ schedule: (new) -> scheduled
Stores a task to become pending after a delay measured on the Redis server's clock, so a client
whose clock is off cannot make it run early. Same id rules as enqueue.
KEY tasks          tasks hash
KEY scheduled      scheduled zset: id -> due time (ms)
KEY tick           wake-up list forwarders block on (signalled when the earliest due time moves up)
KEY lock           uniqueness lock key (placeholder when not unique)
KEY archived       archived zset
KEY completed      completed zset
KEY @events
KEY children       children hash (includes/flow): the tasks waiting on a replaced task are told
                   it was deleted (includes/exit), as when an operator deletes it
KEY outbox         the queue's outbox stream (includes/flow)
ARG id             task id
ARG msg            encoded message
ARG unique         uniqueness TTL in seconds, counted from the due time; 0 = not unique
ARG delay          milliseconds from now until due (> 0)
ARG now            '' = Redis time; else a simulated time in ms (tests)
ARG check          '1' = the caller chose the id: check it; '0' = a generated (random) id
ARG mode           '' = unique or throttled (`unique` > 0) or neither; 'd' = debounce: if the task
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
--- @include "bands"
local id, debounce = A.id, A.mode == 'd'
local seen = new_id(K.tasks, id, A.msg, A.check == '1')
if seen == 'own' then
  local due = tonumber(redis.call('ZSCORE', K.scheduled, id)) or now_ms(A.now)
  if debounce then
    return {due, ''}  -- (what it replaced the first time is not known any more)
  end
  return due
elseif seen == 'taken' then
  return -2
end
local delay = tonumber(A.delay)
local due = now_ms(A.now) + delay
if due >= HOLD_FLOOR then  -- (before any write, the debounce SET too: includes/bands)
  return error(DUE_REFUSED)
end
local ttl = tonumber(A.unique)
local replaced, replaced_msg = '', ''
if debounce then
  local holder = redis.call('GET', K.lock)
  if holder and holder ~= id then
    local v = redis.call('HGET', K.tasks, holder)
    if stored_state(v) == 's' then  -- not started: the new task replaces it (below)
      replaced, replaced_msg = holder, stored_msg(v)
    end
  end
  redis.call('SET', K.lock, id, 'EX', ttl + math.ceil(delay / 1000))  -- first write: a full Redis refuses here
elseif ttl > 0 then
  local refused = take_lock(K.lock, id, ttl + math.ceil(delay / 1000))
  if refused then
    return refused
  end
end
redis.call('HSET', K.tasks, id, 's' .. A.msg)  -- the first write (but the debounce SET): a full Redis refuses here
local cap = events_cap(K.conf)
if replaced ~= '' then  -- deleted only once the new task is stored
  redis.call('HDEL', K.tasks, replaced)
  redis.call('ZREM', K.scheduled, replaced)
  -- its lock is taken over by the new task (above); it has no key (debounce refuses key=)
  task_exit({t = K.tasks, events = K.events, cap = cap, children = K.children, outbox = K.outbox},
            {id = replaced, how = 'debounced', msg = replaced_msg, more = {'by', id}})
end
if seen == 'replace' then
  forget_finished(K.archived, K.completed, id)
end
signal_if_first(K.scheduled, due, K.tick)
redis.call('ZADD', K.scheduled, due, id)
emit_task(K.events, cap, msg_tenant(A.msg, 1), 'e', 'scheduled', 'id', id, 'type', msg_type(A.msg), 'due', due)
if debounce then
  return {due, replaced}
end
return due
