--- Bounded queues (Inspector.set_queue_cap, set_tenant(max_pending=); docs/queues.md "Bounded queues").
--- The caps are fields of the queue's conf hash: 'cap' = 'N r' (at most N pending tasks; a new
--- task beyond them is refused) or 'N d' (drop_oldest: the new task is accepted and the oldest
--- pending tasks are archived to make room), 'cap:<tenant>' the same for the pending tasks of one
--- tenant; 'cap_rejected' and 'cap_dropped' count the tasks refused and dropped (lifetime, every
--- tenant's included). The pending count is includes/priority's: the list (placeholders included),
--- the prio zset and the tenant zset; a tenant's, its range of the tenant zset.
--- A cap bounds what producers add now: the producer entry scripts (enqueue, enqueue_many,
--- enqueue_keyed, enqueue_keyed_many) call cap_gate before their first write and cap_drop after
--- storing their tasks. Tasks already accepted that become pending later (scheduled and retry
--- forwarding, a group's aggregated task, a workflow child released by its parents, a key's next
--- task, an operator's run) never meet a cap: they are counted and may take the count past it.
--- cap_gate(conf, pk, t, news): news = {n = the tasks the call adds, tenants = {tenant = how many}}.
--- Reads only. Returns nil (room: nothing to do), false (full: refuse the call, whole) or the
--- victims {ids, vals} to drop (drop_oldest). A victim is a pending task with no key= and not
--- unique (its lock and its key's next task belong to scripts that name those keys): the oldest
--- by enqueue time of the heads looked at (per lane its first LOOK + wanted ids: the list's right
--- end, each priority band of the prio zset, each band of the tenants the call adds to, the
--- first members of the tenant zset). A call drops at most as many as it adds: a count already
--- past the cap (a lowered cap, forwarded tasks) comes down as the queue drains. Too few victims found: refused (a batch larger than the cap is refused too).
--- cap_refuse(conf, n): count n refused tasks; returns QUEUE_FULL (the scripts' reply code -10).
--- cap_drop(k, victims): archive the victims (reason DROPPED, event 'archived' through
--- includes/exit task_exit: their workflow children are told) and count them. ``k``: the script's K,
--- which names the exit group (core/spine/scripts.py KEY_GROUPS ``@exit``), tasks and archived.
--- @include "priority"
--- @include "take"
--- @include "stored"
--- @include "now"
--- @include "exit"
local QUEUE_FULL, LOOK, DROPPED = -10, 10, 'dropped: queue full'
local function cap_parse(v)  -- 'N r|d' -> N, drop (nil when no cap)
  local n, mode = string.match(v or '', '^(%d+) ([rd])$')
  if not n then
    return nil, false
  end
  return tonumber(n), mode == 'd'
end
local function cap_enqueued(v)  -- a stored value's enqueue time (ms; 0 when unreadable)
  local at = msg_field(v, 2, F.enqueued_at_ms)
  local b = at and string.byte(v, at)
  if not b then
    return 0
  elseif b <= 0x7f then
    return b
  elseif b >= 0xcc and b <= 0xcf then
    return mp_uint(v, at + 1, 2 ^ (b - 0xcc)) or 0
  end
  return 0
end
local function cap_droppable(v)  -- pending, no key, not unique
  if stored_state(v) ~= 'p' then
    return false
  end
  local at = msg_field(v, 2, F.key)
  if at and string.byte(v, at) ~= 0xa0 then
    return false
  end
  at = msg_field(v, 2, F.unique)
  return not (at and string.byte(v, at) == 0xc3)
end
local function cap_lanes(pk, tenants, want)  -- the ids at the heads of the lanes looked at
  local n, ids, seen = LOOK + want, {}, {}
  local function add(id)
    if id ~= '' and not seen[id] then
      seen[id] = true
      ids[#ids + 1] = id
    end
  end
  local function add_members(members)
    for _, m in ipairs(members) do
      add(string.sub(m, string.find(m, '\0', 1, true) + 18))
    end
  end
  local tail = redis.call('LRANGE', pk[1], -n, -1)
  for k = #tail, 1, -1 do  -- (oldest first: a tie of enqueue times goes by the order gathered)
    add(tail[k])
  end
  for p = 9, 0, -1 do
    if p ~= DEFAULT_PRIORITY then
      local lo = (9 - p) * BAND
      for _, id in ipairs(redis.call('ZRANGE', pk[2], string.format('%.0f', lo),
          '(' .. string.format('%.0f', lo + BAND), 'BYSCORE', 'LIMIT', 0, n)) do
        add(id)
      end
    end
  end
  if pk[3] then
    add_members(redis.call('ZRANGE', pk[3], 0, n - 1))
    for tenant in pairs(tenants) do
      for p = 9, 0, -1 do
        add_members(redis.call('ZRANGE', pk[3], '[' .. tenant .. '\0' .. tenant_band(p),
          '(' .. tenant .. '\0' .. string.char(58 - p), 'BYLEX', 'LIMIT', 0, n))
      end
    end
  end
  return ids
end
local function cap_pick(t, ids, want, tenant, picked)  -- the ``want`` oldest droppable (of ``tenant``)
  local found = {}
  for _, id in ipairs(ids) do
    if not picked[id] then
      local v = redis.call('HGET', t, id)
      if v and cap_droppable(v) and (tenant == nil or msg_tenant(v, 2) == tenant) then
        found[#found + 1] = {cap_enqueued(v), id, v, #found}
      end
    end
  end
  if #found < want then
    return false
  end
  table.sort(found, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[4] < b[4]) end)
  local out = {}
  for k = 1, want do
    out[k] = found[k]
    picked[found[k][2]] = true
  end
  return out
end
local function cap_gate(conf, pk, t, news)
  local fields, names = {'cap'}, {}
  for tenant in pairs(news.tenants) do
    names[#names + 1] = tenant
    fields[#fields + 1] = 'cap:' .. tenant
  end
  local got = redis.call('HMGET', conf, unpack(fields))
  local qcap, qdrop = cap_parse(got[1])
  local per, any = {}, qcap ~= nil
  for k, tenant in ipairs(names) do
    local n, drop = cap_parse(got[k + 1])
    if n then
      per[tenant], any = {n, drop}, true
    end
  end
  if not any then
    return nil
  end
  local victims, picked, lanes = {n = news.n}, {}, nil
  local function make_room(cap, drop, count, new, tenant)  -- false: refuse
    local over = count + new - cap
    if over <= 0 then
      return true
    elseif not drop or new > cap then
      return false
    end
    lanes = lanes or cap_lanes(pk, news.tenants, news.n)
    local got_v = cap_pick(t, lanes, math.min(over, new), tenant, picked)  -- (never more than it adds)
    if not got_v then
      return false
    end
    for _, vic in ipairs(got_v) do
      victims[#victims + 1] = vic
    end
    return true
  end
  for tenant, c in pairs(per) do
    local count = redis.call('ZLEXCOUNT', pk[3], '[' .. tenant .. '\0', '(' .. tenant .. '\1')
    if not make_room(c[1], c[2], count, news.tenants[tenant], tenant) then
      return false
    end
  end
  if qcap and not make_room(qcap, qdrop, pending_count(pk) - #victims, news.n, nil) then
    return false
  end
  if #victims == 0 then
    return nil
  end
  return victims
end
local function cap_refuse(conf, n)
  redis.call('HINCRBY', conf, 'cap_rejected', n)
  return QUEUE_FULL
end
local function cap_drop(k, victims)
  local x = {t = k.tasks, events = k.events, conf = k.conf, children = k.children, outbox = k.outbox,
             keyheld = k.keyheld, blocked = k.blocked, wake = k.wake,
             pending = k.pending, prio = k.prio, tq = k.tq, tr = k.tr, tn = k.tn, ta = k.ta}
  local archived, pk, now = k.archived, exit_pk(x), now_ms('')
  for _, vic in ipairs(victims) do
    local id, v = vic[2], vic[3]
    if take(pk[1], 'p', id, LOOK + victims.n, -1, pk, v) then
      local msg = stored_msg(v)
      redis.call('HSET', x.t, id, 'x' .. msg)
      redis.call('ZADD', archived, now, id)
      redis.call('HINCRBY', x.conf, 'cap_dropped', 1)
      task_exit(x, {id = id, how = 'archived', msg = msg, error = DROPPED})
    end
  end
end
