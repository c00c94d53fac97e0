--[[ resolve: waiting -> pending (or scheduled), when a parent's end releases the last edge of a child
A propagator delivers one parent's end (read from the parent queue's outbox) to one child, in the
child's slot. Idempotent: the edge is recorded once (a repeat finds it recorded and changes
nothing; the edge is one field of the record, includes/flow: O(1) bytes per edge whatever the
number of parents), and the child's fate is worked out from its record every time, so a propagator killed
after this call and before its acknowledgement repeats it harmlessly. An end that arrives before
the child is stored (it was registered, then the parent ended at once) is kept in a record with no
policy, which enqueue_after merges (a repeat that finds the child stored but its record gone,
deleted with a finished task, writes nothing).
KEY tasks          tasks hash
KEY waiting        waiting zset
KEY deps           deps hash: child id -> its record (includes/flow)
KEY @pending
KEY wake           wake-up list idle workers block on
KEY @events
KEY scheduled      scheduled zset (a child released before its due time waits there)
KEY tick           wake-up list forwarders block on
ARG child          the child's id
ARG ref            the parent's ref: rec_pack{queue, id}
ARG state          how the parent ended: 'c' .. result (msgpack, may be empty) / 'x' / 'd'
ARG now            '' = Redis time; else a simulated time in ms
Returns 1 = the child is pending now (4: scheduled, its due time ahead), 2 = it still waits, 3 = it waits, a parent failed and its
policy is cancel (the caller archives it with fail_waiting), 0 = nothing to do (no such child
waiting, or an end kept for a child not stored yet).
]]
--- @include "now"
--- @include "flow"
--- @include "release"
--- @include "stored"
local child, ref, state = A.child, A.ref, A.state
local deps = K.deps
local ef = edge_field(child, ref)
local h = rec_header(deps, child)
if not h then
  if redis.call('HEXISTS', K.tasks, child) == 0 then  -- not stored yet (else: a repeat after it ended)
    redis.call('HSET', deps, rec_field(child), rec_pack({'', '', tostring(now_ms(A.now)), '', ''}), ef, state)
  end
  return 0
end
if h[1] == '' then  -- the child is not stored yet: keep this end for it (once)
  if redis.call('HEXISTS', deps, ef) == 0 then
    redis.call('HSET', deps, ef, state)
  end
  return 0
end
if redis.call('HGET', deps, ef) == '' then  -- this parent's end, not counted yet (one field: O(1))
  redis.call('HSET', deps, ef, state)
  h[2] = tostring(tonumber(h[2]) - 1)
  if state == 'x' or state == 'd' then
    h[5] = tostring((tonumber(h[5]) or 0) + 1)
  end
  redis.call('HSET', deps, rec_field(child), rec_pack(h))
end
-- (waiting: its entry in the waiting zset, O(1); the stored value, which holds every parent's ref,
-- is read only for the release: reading it at each edge made a fan-in O(parents^2))
if not redis.call('ZSCORE', K.waiting, child) then
  return 0
end
if h[1] == 'c' and (tonumber(h[5]) or 0) > 0 then
  return 3
end
if h[2] ~= '0' then
  return 2
end
local v = redis.call('HGET', K.tasks, child)
if not v or stored_state(v) ~= 'w' then
  return 0
end
redis.call('ZREM', K.waiting, child)
return release(K.tasks, G.pending, K.wake, K.scheduled, K.tick, K.events, events_cap(K.conf), child,
               stored_msg(v), tonumber(h[4]) or 0, now_ms(A.now))
