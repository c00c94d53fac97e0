--[[ register_child: a parent learns of a child that waits on it (the first step of enqueue(after=))
Runs in the parent's slot. A live parent (any state but completed or archived) gets the child's ref
appended to its entry in the children hash; its finishing script will write its end to the
queue's outbox for the propagators (includes/flow). An ended parent answers how it ended: the
caller stores the child with that parent already resolved. Sent again, the ref is appended twice:
harmless (resolving an edge twice is a no-op).
KEY tasks          the parent queue's tasks hash
KEY children       the parent queue's children hash: parent id -> rec_pack of child refs
ARG parent         the parent's id
ARG child          the child's ref: rec_pack{queue, id}
Returns {1} = registered (the parent is live), {2, message} = it completed (its stored message,
with its result), {3} = it is archived, {0} = no such task (deleted, or completed without
retention: its result is gone), {4} = it cannot be a parent (in an aggregation group, or
targeted: those end in other scripts).
]]
--- @include "flow"
--- @include "stored"
local v = redis.call('HGET', K.tasks, A.parent)
if not v then
  return {0}
end
local st = stored_state(v)
if st == 'c' then
  return {2, stored_msg(v)}
elseif st == 'x' then
  return {3}
elseif st == 'g' or st == 'm' then  -- aggregated into another task / finished by its runs: no end of its own
  return {4}
end
local kids = redis.call('HGET', K.children, A.parent) or ''
redis.call('HSET', K.children, A.parent, kids .. rec_item(A.child))
return {1}
