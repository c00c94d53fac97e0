--[[ enqueue_many: (new) x N -> pending, in one call (the batch path of Client.enqueue_many)
Stores N tasks and appends them to pending in order, each at the back of its priority
(includes/priority). Unique tasks never come this way (they take enqueue.lua one by one). Ids the client generated (random, 96 bits) cannot collide and skip the
id check; a batch with caller-chosen ids is checked like enqueue.lua: a live task with the same id
is a conflict (as is an id given twice in one batch), a finished (archived/completed) one is
replaced.
KEY tasks          tasks hash
KEY archived       archived zset (a replaced archived task leaves it)
KEY completed      completed zset (a replaced completed task leaves it)
KEY marker         generated ids: this call's batch marker (a random token per call; set for a
                   minute); caller-chosen ids: a never-set placeholder
KEY @exit           the keys a task's end shares (includes/exit): a task the admission drops ends
ARG check          '1' = check ids for conflicts, '0' = generated ids
ARG entries... {id value}  id1, value1, id2, value2, ...   value = 'p' .. encoded message (the stored value)
Events: one 'enqueued' entry per task; a batch of generated ids (URL-safe base64, no space) of
one type writes a single entry for the whole batch, its field 'ids' holding them space-separated
(core/results/events.py expands it into one event per task).
Returns the 1-based positions of the tasks refused because a live task has their id ({} = none),
or the refusal of the producer entry (includes/admit) instead of a list: nothing of the batch is
stored.
Sent again after a lost reply (includes/newtask), the call writes nothing it wrote before: with
generated ids, the batch's marker (SET NX, 60 s) says this very call ran already (its tasks may
have finished in any order since: no id of the batch is looked at); with caller-chosen ids, each
id holding its own unchanged message counts as enqueued. The marker's SET is the first write, so
a full Redis (maxmemory) refuses the whole call.
]]
--- @include "signal"
--- @include "newtask"
--- @include "events"
--- @include "priority"
--- @include "stored"
--- @include "admit"
local ids, vals, refused = {}, {}, {}
local function gate(vs)  -- the batch's admission (includes/admit): refusal, ticket
  local news = admit_news()
  for _, v in ipairs(vs) do
    admit_count(news, v, 2)
  end
  return admit(K, G.pending, news)
end
local refusal, ticket = nil, nil
if A.check ~= '1' then  -- generated ids: the entries are already the HSET field/value list
  if redis.call('PTTL', K.marker) ~= -2 then  -- (PTTL, not EXISTS: EXISTS is the operator scripts' guard, refused to producers)
    return refused  -- sent again: this call stored its batch already
  end
  local flat = {A.entries.all()}  -- (one unpack, as the HSET below: no view object per entry)
  for i = 1, A.entries.n do
    ids[i], vals[i] = flat[2 * i - 1], flat[2 * i]
  end
  refusal, ticket = gate(vals)
  if refusal then
    return refusal
  end
  redis.call('SET', K.marker, '1', 'NX', 'PX', 60000)  -- first write: a full Redis refuses the call here
  redis.call('HSET', K.tasks, A.entries.all())
else
  local fields, seen = {}, {}
  for i = 1, A.entries.n do
    local e = A.entries[i]
    local id, value = e.id, e.value
    local status = seen[id] and 'taken' or new_id(K.tasks, id, stored_msg(value), true)
    if status == 'taken' then
      refused[#refused + 1] = i
    else
      seen[id] = true
    end
    if status == 'new' or status == 'replace' then
      fields[#fields + 1] = id
      fields[#fields + 1] = value
      ids[#ids + 1] = id
      vals[#vals + 1] = value
    end
  end
  refusal, ticket = gate(vals)
  if refusal then
    return refusal
  end
  if #ids > 0 then
    redis.call('HSET', K.tasks, unpack(fields))  -- first write: a full Redis refuses the call here
    for _, id in ipairs(ids) do
      forget_finished(K.archived, K.completed, id)
    end
  end
end
admit_done(K, ticket)
if #ids > 0 then
  push_many(G.pending, ids, vals)
  signal(K.wake)
  local cap = events_cap(K.conf)
  if cap > 0 then
    local types, tenants, same = {}, {}, A.check ~= '1' and #ids > 1
    for n = 1, #ids do
      types[n], tenants[n] = msg_type(vals[n], 2), msg_tenant(vals[n], 2) or false  -- (read in place: no copy)
      same = same and types[n] == types[1] and tenants[n] == tenants[1]
    end
    if same and tenants[1] then  -- generated ids of one type and tenant: one entry for the batch
      emit_ids(K.events, cap, ids, 'enqueued', 'type', types[1], 'tenant', tenants[1])
    elseif same then  -- (ids: space-separated; its cap counts every task: includes/events)
      emit_ids(K.events, cap, ids, 'enqueued', 'type', types[1])
    else
      for n, id in ipairs(ids) do
        emit_task(K.events, cap, tenants[n] or nil, 'e', 'enqueued', 'id', id, 'type', types[n])
      end
    end
  end
end
return refused
