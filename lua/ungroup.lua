--[[ ungroup: aggregating -> (deleted) | archived | pending, by an operator
Takes one task out of its aggregation group, if it is still there unchanged since the caller read
it: deletes it (releasing its uniqueness lock), archives it as it is, or runs it alone (to the head
of pending, with a wake-up token).
KEY tasks             tasks hash
KEY group             the task's group zset
KEY groups            name -> when its newest task joined
KEY groups_first      name -> when its oldest task joined
KEY groups_size       name -> its size
KEY aggregating       the queue's counter of tasks in groups
KEY target            archived zset (archive), pending list (run); the group zset otherwise (unused)
KEY wake              wake-up list idle workers block on
KEY lock              the task's uniqueness lock (the queue's placeholder when not unique)
KEY @events
ARG id
ARG read         the stored value the caller read
ARG verb         delete | archive | run
ARG name         the group's name
ARG now          '' = Redis time; else a simulated time in ms
Returns 1 = done, 0 = no such task, -5 = not aggregating, -8 = changed since read (read it again).
]]
--- @include "now"
--- @include "signal"
--- @include "group"
--- @include "stored"
--- @include "exit"
--- @include "operator"
operator_only(K.tasks)  -- a producer is refused here, before any write
local id, verb = A.id, A.verb
local v = redis.call('HGET', K.tasks, id)
if not v then
  return 0
end
if stored_state(v) ~= 'g' then
  return -5
end
if v ~= A.read then
  return -8
end
leave_group(K.group, K.groups, K.groups_first, K.groups_size, K.aggregating, A.name, {id})  -- removals first: runs on a full Redis
local msg = stored_msg(v)
local x = {t = K.tasks, events = K.events, conf = K.conf}  -- a grouped task has no key and is never a parent
if verb == 'delete' then
  redis.call('HDEL', K.tasks, id)
  task_exit(x, {id = id, how = 'deleted', msg = msg, lock = K.lock})
elseif verb == 'archive' then
  redis.call('HSET', K.tasks, id, 'x' .. msg)
  redis.call('ZADD', K.target, now_ms(A.now), id)
  task_exit(x, {id = id, how = 'archived', msg = msg, lock = K.lock})
else  -- run alone: it stays live (its lock kept); entering pending is no exit
  redis.call('HSET', K.tasks, id, 'p' .. msg)
  redis.call('LPUSH', K.target, id)
  signal(K.wake)
  emit(K.events, events_cap(K.conf), 'e', 'enqueued', 'id', id, 'type', msg_type(msg))
end
return 1
