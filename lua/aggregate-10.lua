--[[ aggregate: aggregating x k -> (deleted), and (new) -> pending: a group's tasks become one task
A server's aggregator read some of a group's tasks (the oldest, up to its max size), turned them
into one task with the user's aggregator function, and calls this: if every one of them is still in
the group, unchanged since read, they are deleted (their uniqueness locks released) and the new task
is pushed to pending, in one step. Else nothing is written (-8): another server aggregated them
first, or an operator changed one; the caller reads the group again. So a group's tasks are
aggregated exactly once however many servers try, and a server that dies before or after this
call leaves the group whole or done.
KEYS[1] tasks         tasks hash
KEYS[2] group         the group's zset
KEYS[3] groups        name -> when its newest task joined
KEYS[4] groups_first  name -> when its oldest task joined
KEYS[5] groups_size   name -> its size
KEYS[6] aggregating   the queue's counter of tasks in groups
KEYS[7] pending       pending list
KEYS[8] wake          wake-up list idle workers block on
KEYS[9] events        the queue's event stream
KEYS[10] conf         the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[11..] locks      the uniqueness locks of the members, named by index j from ARGV (KEYS[10+j])
ARGV[1] name     the group's name
ARGV[2] id       the new task's id (generated)
ARGV[3] msg      the new task's encoded (and, with signing, sealed) message
ARGV[4..] members  one triple per member: id, the stored value read, lock index j (0 = not unique)
Returns 1 = aggregated; -8 = a member left the group or changed since read (nothing written);
-2 = a task with the new id exists (nothing written).
]]
--- @include "signal"
--- @include "unique"
--- @include "group"
--- @include "events"
local ids = {}
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  if not redis.call('ZSCORE', KEYS[2], id) or redis.call('HGET', KEYS[1], id) ~= ARGV[i + 1] then
    return -8
  end
  ids[#ids + 1] = id
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  return -2
end
leave_group(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ids)  -- removals first: runs on a full Redis
redis.call('HDEL', KEYS[1], unpack(ids))
local cap = events_cap(KEYS[10])
for i = 4, #ARGV, 3 do
  local lock = tonumber(ARGV[i + 2])
  if lock > 0 then
    release_lock(KEYS[10 + lock], ARGV[i])
  end
  emit(KEYS[9], cap, 'e', 'aggregated', 'id', ARGV[i], 'type', msg_type(string.sub(ARGV[i + 1], 2)),
    'group', ARGV[1], 'into', ARGV[2])
end
redis.call('HSET', KEYS[1], ARGV[2], 'p' .. ARGV[3])
redis.call('LPUSH', KEYS[7], ARGV[2])
signal(KEYS[8])
emit(KEYS[9], cap, 'e', 'enqueued', 'id', ARGV[2], 'type', msg_type(ARGV[3]), 'group', ARGV[1])
return 1
