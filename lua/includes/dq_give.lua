--- A round's turns given (includes/dq_fair, the dequeue's fair take): each tenant's turns take
--- its oldest tasks of the highest priority (one ZRANGE BYLEX of its range in tq, k+1 members:
--- the extra one says whether it stays in the ring; one HMGET of every tenant's values), the
--- tenant '' takes its turns from the plain take (includes/dq_plain). A task not pending (a stray
--- copy of an id) is dropped; one the gate holds (includes/hold hold_score: a blocked type, a
--- version gate) goes to the scheduled zset before anything is counted (no slot, no token, no
--- turn: the round is short and another follows). A task given takes its tenant's slot (ta and
--- tn 'a:<tenant>', counted for every tenant so that a limit set while its tasks run counts them:
--- includes/tenant tenant_left) and a token of its rate (includes/dq_tenant tenant_charge).
--- Then each tenant: held by its rate (out of the ring, in tw until its next task conforms), or
--- out of the ring (no task left, or at its concurrency: the exit of one of its tasks puts it
--- back), or moved on by its stride per task given.
--- fair_give(s, r): returns how many tenants left the ring, and whether a turn met a held task.
local function give_read(r)  -- each tenant's range, the ids in them and their values (one HMGET)
  local ranges, tids = {}, {}
  for j = 1, r.m do
    local name = r.names[j]
    if r.turns[j] > 0 and name ~= '' then
      ranges[j] = redis.call('ZRANGE', K.tq, '[' .. name .. '\0', '(' .. name .. '\1', 'BYLEX', 'LIMIT', 0,
        r.turns[j] + 1)
      for i = 1, math.min(r.turns[j], #ranges[j]) do
        tids[#tids + 1] = string.sub(ranges[j][i], #name + 19)
      end
    end
  end
  return ranges, #tids > 0 and redis.call('HMGET', K.tasks, unpack(tids)) or {}, tids
end
local function give_tenant(s, name, k, range, vals, tids, at, members)  -- a tenant's k turns: given, held_n, at
  local given, held_n = 0, 0  -- (held_n: its tasks held, which count for nothing)
  local ids, active = s.ids, s.active
  for i = 1, math.min(k, #range) do
    at = at + 1
    local id = tids[at]  -- (cut from its member by give_read)
    members[#members + 1] = range[i]
    local msg = stored_msg_if(vals[at], 'p')  -- (a stray copy of an id, not pending: dropped)
    local score = msg and hold_score(s.holds, vals[at], s.version, K.conf)
    if score then  -- not for this worker: held before it counts (no slot, no token, no turn)
      redis.call('HSET', K.tasks, id, 's' .. msg)
      redis.call('ZADD', K.scheduled, string.format('%.0f', score), id)
      held_n, s.held_any = held_n + 1, true
    elseif msg then
      ids[#ids + 1], s.vals[id], s.checked[id] = id, vals[at], msg  -- (checked: the lease takes it as is)
      active[#active + 1] = id  -- (its tenant slot, counted for every tenant so that a limit set
      active[#active + 1] = name  -- while its tasks run counts them: includes/tenant tenant_left)
      given = given + 1
    end
  end
  if given > 0 then
    redis.call('HINCRBY', K.tn, 'a:' .. name, given)
  end
  return given, held_n, at
end
local function fair_give(s, r)
  local moved, left, members, parked, unpark = {}, {}, {}, {}, {}
  local ranges, vals, tids = give_read(r)
  local at, short = 0, false  -- (short: a tenant's turn met a held task: another round)
  for j = 1, r.m do
    local k, name = r.turns[j], r.names[j]
    if k > 0 then
      local given, held_n, more = 0, 0, false
      if name == '' then
        local got = take_plain(s, k)
        for _, id in ipairs(got) do
          s.ids[#s.ids + 1] = id
        end
        given, more = #got, redis.call('LLEN', K.pending) + s.prios > 0
      else
        given, held_n, at = give_tenant(s, name, k, ranges[j], vals, tids, at, members)
        short, more = short or held_n > 0, #ranges[j] > k
      end
      local due = tenant_charge(s, name, given)  -- (with a rate: when its next task conforms)
      local capped = given >= r.free[j]  -- (its concurrency, or its rate: no more now)
      local by_rate = due and more and due > s.now and r.cfree[j] > given  -- (not its concurrency)
      if by_rate then  -- no task allowed now: held by its rate until the next one conforms
        left[#left + 1] = name
        parked[#parked + 1] = string.format('%.0f', due)
        parked[#parked + 1] = name
      elseif not more or capped then  -- out of the ring (a held tenant is put back by the exit of one of its tasks)
        left[#left + 1] = name
        unpark[#unpark + 1] = name
      else
        moved[#moved + 1] = string.format('%.0f', r.pass0[j] + given * r.stride[j])
        moved[#moved + 1] = name
        unpark[#unpark + 1] = name
      end
    end
  end
  if #left > 0 then
    redis.call('ZREM', K.tr, unpack(left))
  end
  if #moved > 0 then
    redis.call('ZADD', K.tr, unpack(moved))
  end
  if #members > 0 then
    redis.call('ZREM', K.tq, unpack(members))
  end
  if s.waiting and #unpark > 0 then  -- (a tenant a push put back in the ring while held: not held now)
    redis.call('ZREM', K.tw, unpack(unpark))
  end
  if #parked > 0 then
    redis.call('ZADD', K.tw, unpack(parked))
    s.waiting = true
  end
  return #left, short
end
