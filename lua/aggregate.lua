--[[ aggregate: aggregating x k -> (deleted), and (new) -> pending: a group's tasks become one task
A server's aggregator read some of a group's tasks (the oldest, up to its max size), turned them
into one task with the user's aggregator function, and calls this: if every one of them is still in
the group, unchanged since read, they are deleted (their uniqueness locks released) and the new task
is pushed to pending, in one step. Else nothing is written (-8): another server aggregated them
first, or an operator changed one; the caller reads the group again. So a group's tasks are
aggregated exactly once however many servers try, and a server that dies before or after this
call leaves the group whole or done.
KEY tasks             tasks hash
KEY group             the group's zset
KEY groups            name -> when its newest task joined
KEY groups_first      name -> when its oldest task joined
KEY groups_size       name -> its size
KEY aggregating       the queue's counter of tasks in groups
KEY pending           pending list
KEY wake              wake-up list idle workers block on
KEY @events
KEY locks...          the uniqueness locks of the members, named by index j from ARGV (K.locks[j])
ARG name         the group's name
ARG id           the new task's id (generated)
ARG msg          the new task's encoded (and, with signing, sealed) message
ARG members... {id read lock}  one item per member: id, the stored value read, lock index j (0 = not unique)
Returns 1 = aggregated; -8 = a member left the group or changed since read (nothing written);
-2 = a task with the new id exists (nothing written).
]]
--- @include "signal"
--- @include "group"
--- @include "stored"
--- @include "exit"
local ids = {}
for i = 1, A.members.n do
  local m = A.members[i]
  local id = m.id
  if not redis.call('ZSCORE', K.group, id) or redis.call('HGET', K.tasks, id) ~= m.read then
    return -8
  end
  ids[#ids + 1] = id
end
if redis.call('HEXISTS', K.tasks, A.id) == 1 then
  return -2
end
leave_group(K.group, K.groups, K.groups_first, K.groups_size, K.aggregating, A.name, ids)  -- removals first: runs on a full Redis
redis.call('HDEL', K.tasks, unpack(ids))
local cap = events_cap(K.conf)
local x = {t = K.tasks, events = K.events, cap = cap}  -- grouped tasks have no key and are never parents
for i = 1, A.members.n do
  local m = A.members[i]
  local lock = tonumber(m.lock)
  task_exit(x, {id = m.id, how = 'aggregated', msg = stored_msg(m.read),
                lock = lock > 0 and K.locks[lock] or nil, more = {'group', A.name, 'into', A.id}})
end
redis.call('HSET', K.tasks, A.id, 'p' .. A.msg)
redis.call('LPUSH', K.pending, A.id)
signal(K.wake)
emit(K.events, cap, 'e', 'enqueued', 'id', A.id, 'type', msg_type(A.msg), 'group', A.name)
return 1
