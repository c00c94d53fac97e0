--- Tenant slots and tenant rates, the dequeue's account of them (lua/dequeue.lua; includes/tenant
--- holds the settings, the rate's schedule and the slots' bookkeeping). Included inside the fair
--- take's take_fair (includes/dq_fair), which calls these; the state is the dequeue's table ``s`` (s.vt the virtual time,
--- s.settings: some tenant has settings or the queue has defaults, s.defaults the queue's, s.tbk
--- each tenant's rate as read this call, s.waiting: tw may hold a tenant) and a round's table
--- ``r`` (names, pass, turns, stride, free, cfree of the m tenants read from the ring).
--- A tenant whose rate allows no task now leaves the ring for ``tw`` (tenant -> when its next task
--- conforms: a key of its own, never a band of the ring's passes).
--- tenant_back(s, n): each dequeue first puts back in the ring at V the tenants of tw whose next
--- task is due, or whose rate is gone (one ZRANGE of tw's first n+1, and one HMGET of their
--- settings while some are not due; NX: one a push put back keeps its pass); one with no pending
--- task left (deleted, dropped by a cap while it waited) leaves tw and stays out of the ring (one
--- range read a tenant: the ring holds only tenants with work). Returns whether tw existed (a
--- tenant the dequeue serves may be in it too).
--- tenant_admit(s, r): a round's tenants' settings (one HMGET): weights (a tenant of weight w
--- takes w turns to one of weight 1: its stride), pauses and concurrency (free slots: out of the
--- ring when none) and rates (free: the tasks its rate allows now; none: out of the ring, in tw).
--- tenant_charge(s, name, given): a tenant's rate schedule moves on by the tasks it started
--- (kept until it says nothing more: includes/tenant tenant_rest); returns when its next task
--- conforms (false: no rate). A task held by the take (includes/hold) is not charged.
local TENANT_STRIDE = 1000  -- a turn's growth of a tenant's pass (weight 1)
local function tenant_back(s, n)
  local tw, now, settings = K.tw, s.now, s.settings
  local heads = redis.call('ZRANGE', tw, 0, n, 'WITHSCORES')
  if #heads == 0 then
    return false
  end
  local back, names, check = {}, {}, {}
  for j = 1, #heads, 2 do
    if tonumber(heads[j + 1]) <= now or not settings then
      names[#names + 1] = heads[j]
    else
      check[#check + 1] = heads[j]
    end
  end
  if #check > 0 then
    local fields = {}
    for j, name in ipairs(check) do
      fields[j] = 'l:' .. name
    end
    local ls = redis.call('HMGET', K.tn, unpack(fields))
    for j, name in ipairs(check) do
      local _, _, _, r = tenant_settings(ls[j], s.defaults)
      if r <= 0 then
        names[#names + 1] = name
      end
    end
  end
  if #names > 0 then
    for _, name in ipairs(names) do  -- (one whose tasks left meanwhile, deleted or dropped, just leaves tw)
      if redis.call('ZRANGE', K.tq, '[' .. name .. '\0', '(' .. name .. '\1', 'BYLEX', 'LIMIT', 0, 1)[1] then
        back[#back + 1], back[#back + 2] = string.format('%.0f', s.vt), name
      end
    end
    redis.call('ZREM', tw, unpack(names))
    if #back > 0 then
      redis.call('ZADD', K.tr, 'NX', unpack(back))
    end
  end
  return true
end
local function tenant_admit(s, r)
  local names, pass, stride, free, cfree, m = r.names, r.pass, r.stride, r.free, r.cfree, r.m
  local fields, out, held = {}, {}, {}
  for j = 1, m do
    fields[3 * j - 2], fields[3 * j - 1], fields[3 * j] = 'l:' .. names[j], 'a:' .. names[j], 'k:' .. names[j]
  end
  local ls = redis.call('HMGET', K.tn, unpack(fields))
  for j = 1, m do
    local w, p, c, rt, b = tenant_settings(ls[3 * j - 2], s.defaults)
    stride[j] = math.floor(TENANT_STRIDE / w + 0.5)
    if c > 0 and names[j] ~= '' then
      free[j] = c - (tonumber(ls[3 * j - 1]) or 0)
      cfree[j] = free[j]
    end
    if (p or free[j] <= 0) and names[j] ~= '' then  -- (paused, or at its concurrency: out of the ring)
      out[#out + 1] = names[j]
      pass[j] = math.huge
    elseif rt > 0 and names[j] ~= '' and pass[j] ~= math.huge then  -- its rate (includes/tenant)
      local allow, eff = tenant_rate(ls[3 * j], rt, b, s.now)
      s.tbk[names[j]] = {eff, rt, b}
      free[j] = math.min(free[j], allow)
      if free[j] <= 0 then  -- none allowed now: held by its rate (out of the ring, in tw)
        held[#held + 1], held[#held + 2] = string.format('%.0f', tenant_rate_due(eff, rt, b)), names[j]
        out[#out + 1] = names[j]
        pass[j] = math.huge
      end
    end
  end
  if #out > 0 then
    redis.call('ZREM', K.tr, unpack(out))
  end
  if #held > 0 then
    redis.call('ZADD', K.tw, unpack(held))
    s.waiting = true
  end
end
local function tenant_charge(s, name, given)
  local bk = s.tbk[name]
  if bk and given > 0 then  -- its schedule moves on by the tasks started (kept until it says nothing more: tenant_rest)
    bk[1] = bk[1] + given * 1000 / bk[2]
    tenant_rate_set(K.tn, name, bk[1])
    return tenant_rate_due(bk[1], bk[2], bk[3])
  end
  return false
end
