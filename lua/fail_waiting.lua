--[[ fail_waiting: waiting -> archived, when a parent failed and the child's policy is cancel
The propagator (or the client, when a parent had already failed) archives the child with an error
naming the parent; the child's own children are told in turn (their outbox entry cancels them,
or runs them, by their own policies).
KEY tasks          tasks hash
KEY waiting        waiting zset
KEY archived       archived zset: id -> time archived (ms)
KEY children       children hash (includes/flow)
KEY outbox         the queue's outbox stream (includes/flow)
KEY @events
ARG id
ARG read           the stored value the caller read ('w' .. message): it must be unchanged
ARG msg            the message rewritten with the error
ARG now            '' = Redis time; else a simulated time in ms
ARG error          the error (for the event)
Returns 1 = archived ('!' when it had children of its own), 0 = no such task, -8 = changed since
read (or no longer waiting).
]]
--- @include "now"
--- @include "stored"
--- @include "exit"
local id = A.id
local v = redis.call('HGET', K.tasks, id)
if not v then
  return 0
elseif v ~= A.read or stored_state(v) ~= 'w' then
  return -8
end
redis.call('HSET', K.tasks, id, 'x' .. A.msg)
redis.call('ZREM', K.waiting, id)
redis.call('ZADD', K.archived, now_ms(A.now), id)
-- no lock, no key: enqueue(after=) refuses unique= and key=; not active: no progress
return told(1, task_exit({t = K.tasks, events = K.events, conf = K.conf, children = K.children, outbox = K.outbox},
                         {id = id, how = 'archived', msg = A.msg, error = A.error}))
