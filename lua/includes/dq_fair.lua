--- The fair take (lua/dequeue.lua's take stage, includes/dq_take; docs/internals-tenants.md
--- "Tenants"): while any tenant has pending tasks (the ring ``tr`` exists, or ``tw`` holds a
--- tenant by its rate), the tasks are handed out in turns: each turn goes to the tenant of the
--- least pass in the ring (ties by name), which then grows by its stride; the tasks without a
--- tenant are the tenant '' (put in the ring at the virtual time when they wait and it is not
--- there). One round reads at most want+1 ring entries and merges the turns in Lua (the
--- (want+1)-th entry read bounds them: a tenant not read may come before its next turn), then takes
--- each tenant's tasks with one ZRANGE BYLEX of its range (k+1 members: the extra one says whether
--- it stays in the ring) and one HMGET of all their values; a tenant left with none leaves the
--- ring. Another round (at most 8) only when a tenant had fewer tasks than its turns, or a turn
--- met a held task. The queue's virtual time (``tn`` 'v') is the last turn's pass; when no tenant
--- has work, ``tn``'s 'v' and 'q' go (includes/tenant tenant_rest). The passes are rebased (each
--- pass and V less V) when V reaches PASS_REBASE (includes/tenant): they stay exact doubles.
--- A tenant's task is checked against the gate (includes/hold hold_score) as its turn takes it,
--- before anything is counted: a held one takes no tenant slot, no token of its tenant's rate and
--- no turn (the tenant takes its next task instead). Slots and rates: includes/dq_tenant.
--- take_fair(s, n): up to n pending ids (a tenant's also in s.vals: id -> stored value, read once).
--- Its helpers (includes/dq_tenant, includes/dq_give and the fair_* below) are defined inside it:
--- a dequeue that meets no tenant makes no closure for them (every top-level function of a script
--- is made again on each call of it: ~0.3 µs each, measured).
--- @include "dq_plain"
local function take_fair(s, n)
--- @include "dq_tenant"
--- @include "dq_give"
local function fair_rebase(vt)  -- passes back near 0 (each less V): they stay exact, and V with them
  local all = redis.call('ZRANGE', K.tr, 0, -1, 'WITHSCORES')
  local args = {}
  for j = 1, #all, 2 do
    args[#args + 1], args[#args + 2] = string.format('%.0f', tonumber(all[j + 1]) - vt), all[j]
  end
  if #args > 0 then
    redis.call('ZADD', K.tr, unpack(args))
  end
  return 0
end
local function fair_turns(s, r, want)  -- merge the round's turns: the least pass first
  local names, pass, turns, stride, free, m = r.names, r.pass, r.turns, r.stride, r.free, r.m
  -- the (want+1)-th tenant read bounds the turns: tenants not read may come before its next one
  local bound = m == want + 1 and m or nil
  for _ = 1, want do
    local b = 1
    for j = 2, m do
      if pass[j] < pass[b] or (pass[j] == pass[b] and names[j] < names[b]) then
        b = j
      end
    end
    if b == bound or pass[b] == math.huge then
      break
    end
    turns[b] = turns[b] + 1
    s.vt = pass[b]
    pass[b] = turns[b] < free[b] and pass[b] + stride[b] or math.huge  -- (at its concurrency: no more)
  end
  return bound
end
local function fair_round(s, n)  -- one round of turns; returns true when another is needed
  local want = n - #s.ids
  local heads = want > 0 and redis.call('ZRANGE', K.tr, 0, want, 'WITHSCORES') or {}
  if #heads == 0 then
    return false
  end
  local r = {names = {}, pass = {}, turns = {}, stride = {}, free = {}, cfree = {}, pass0 = {}, m = #heads / 2}
  for j = 1, r.m do
    r.names[j], r.pass[j], r.turns[j], r.stride[j] = heads[2 * j - 1], tonumber(heads[2 * j]), 0, TENANT_STRIDE
    r.free[j], r.cfree[j] = math.huge, math.huge  -- (free: of its tokens too; cfree: of its concurrency)
  end
  if s.settings then  -- weights, pauses, concurrency, rates (includes/dq_tenant)
    tenant_admit(s, r)
  end
  for j = 1, r.m do
    r.pass0[j] = r.pass[j]  -- (each tenant's pass before this round's turns)
  end
  local bound = fair_turns(s, r, want)
  local left, short = fair_give(s, r)
  return not (#s.ids >= n or (left == 0 and not bound and not short))
end
  -- (take_fair's body: the functions above are its own)
  local head = redis.call('HMGET', K.tn, 'v', 'o', 'd')
  s.defaults = head[3]  -- (o: tenants with settings of their own; d: the queue's defaults for the others)
  s.vt, s.settings = tonumber(head[1] or '0'), tonumber(head[2] or '0') > 0 or s.defaults ~= false
  if redis.call('LLEN', K.pending) + s.prios > 0 and not redis.call('ZSCORE', K.tr, '') then
    redis.call('ZADD', K.tr, string.format('%.0f', s.vt), '')  -- the tasks without a tenant take their turns as the tenant ''
  end
  s.waiting = tenant_back(s, n)  -- (tenants held by their rate)
  s.ids, s.active, s.tbk = {}, {}, {}
  for _ = 1, 8 do  -- (rounds: another only when a tenant had fewer tasks than its turns)
    if not fair_round(s, n) then
      break
    end
  end
  if #s.active > 0 then
    redis.call('HSET', K.ta, unpack(s.active))
  end
  if redis.call('EXISTS', K.tr) == 0 and redis.call('EXISTS', K.tq) == 0 then
    tenant_rest(K.tn, s.now)  -- no tenant has work: the virtual time and seq start again (full buckets go)
    if s.waiting then
      redis.call('DEL', K.tw)
    end
  else
    local vt = s.vt
    if vt >= PASS_REBASE then
      vt = fair_rebase(vt)
    end
    redis.call('HSET', K.tn, 'v', string.format('%.0f', vt))
  end
  return s.ids
end
