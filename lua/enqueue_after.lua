--[[ enqueue_after: (new) -> waiting (or pending / scheduled, when every parent has already ended)
The second step of enqueue(after=): the child is stored in its own slot, after the client
registered it with each parent (register_child, in each parent's slot) and learnt which parents
had already ended. Its record (includes/flow) lists every parent; one that ended between its
registration and now may already have been resolved (resolve wrote a record with no policy):
those ends are kept.
KEY tasks          tasks hash
KEY waiting        waiting zset: id -> when it began to wait (ms)
KEY deps           deps hash: child id -> its record (includes/flow)
KEY @pending
KEY wake           wake-up list idle workers block on
KEY @events
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed       completed zset (a replaced completed task leaves it)
KEY scheduled       scheduled zset (a child released before its due time waits there)
KEY tick           wake-up list forwarders block on
ARG id
ARG msg            the encoded message
ARG check          '1' = a caller-chosen id (checked for conflicts), '0' = generated
ARG policy         'c' cancel / 'r' run / 'i' ignore, when a parent fails
ARG now            '' = Redis time; else a simulated time in ms
ARG delay          ms from now before it may run once released (0 = at once; process_in/process_at)
ARG cancelled      policy 'c': the message rewritten as cancelled by a failed parent, stored archived
                   at once (in this script: no second step a lost reply or a crash could skip) when a
                   parent has already failed; '' otherwise
ARG ends... {ref state}  one item per parent: its ref (rec_pack{queue, id}) and how it ended as far as the
          caller knows ('' = not ended; 'c' .. result = completed; 'x' archived; 'd' deleted)
Returns 1 = pending (no parent left to wait for), 4 = scheduled (the same, its due time ahead),
2 = waiting, 3 = archived (a parent had already failed and the policy is cancel), -2 = a live task
has this id.
Sent again after a lost reply: its own stored task is found (new_id 'own', or its archived
cancelled message): nothing written, the code of the state it is in now.
]]
--- @include "now"
--- @include "newtask"
--- @include "flow"
--- @include "release"
--- @include "stored"
--- @include "exit"
local id, msg, policy, cancelled = A.id, A.msg, A.policy, A.cancelled
local STATE_CODE = {w = 2, x = 3, s = 4}
local prior = redis.call('HGET', K.tasks, id)
if prior and cancelled ~= '' and prior == 'x' .. cancelled then  -- its own archived write, sent again
  return 3
end
-- stored waiting first (the first write: a full Redis refuses the call here, whole)
local refused = store_new(K.tasks, id, 'w', msg, A.check == '1', K.waiting, 0, K.archived, K.completed)
if refused == 1 then  -- sent again: its own write, in whatever state it has reached since
  local now_v = redis.call('HGET', K.tasks, id)
  return STATE_CODE[stored_state(now_v) or ''] or 1
elseif refused then
  return refused
end
local now = now_ms(A.now)
local deps = K.deps
local h = rec_header(deps, id)
local early = h and h[1] == ''  -- ends resolved before this child was stored (its edge fields)
if h and not early then  -- the record of a finished task this one replaces
  rec_forget(deps, id)
end
local due = tonumber(A.delay) > 0 and now + tonumber(A.delay) or 0
local refs, seen, left, failed = {}, {}, 0, 0
local fields = {}  -- field, value pairs: one HSET per 500 edges
for i = 1, A.ends.n do
  local e = A.ends[i]
  local ref, st = e.ref, e.state
  refs[#refs + 1] = ref
  if not seen[ref] then  -- a parent named twice is one edge
    seen[ref] = true
    local ef = edge_field(id, ref)
    if st == '' and early then
      st = redis.call('HGET', deps, ef) or ''
    end
    if st == '' then
      left = left + 1
    elseif st == 'x' or st == 'd' then
      failed = failed + 1
    end
    fields[#fields + 1] = ef
    fields[#fields + 1] = st
  end
end
fields[#fields + 1] = order_field(id)
fields[#fields + 1] = rec_pack(refs)
fields[#fields + 1] = rec_field(id)
fields[#fields + 1] = rec_pack({policy, tostring(left), tostring(now), tostring(due), tostring(failed)})
for i = 1, #fields, 1000 do
  redis.call('HSET', deps, unpack(fields, i, math.min(#fields, i + 999)))
end
failed = failed > 0
local cap = events_cap(K.conf)
if left == 0 and not (failed and policy == 'c') then
  return release(K.tasks, G.pending, K.wake, K.scheduled, K.tick, K.events, cap, id, msg, due, now)
end
if failed and policy == 'c' then  -- a parent failed already: archived at once, in this step
  redis.call('HSET', K.tasks, id, 'x' .. cancelled)
  redis.call('ZADD', K.archived, now, id)
  -- just stored: no lock (after= refuses unique=), no key, no progress, no children yet: the event
  task_exit({t = K.tasks, events = K.events, cap = cap},
            {id = id, how = 'archived', msg = msg, error = 'cancelled: a parent failed'})
  return 3
end
redis.call('ZADD', K.waiting, now, id)
emit_task(K.events, cap, msg_tenant(msg, 1), 'e', 'waiting', 'id', id, 'type', msg_type(msg))
return 2
