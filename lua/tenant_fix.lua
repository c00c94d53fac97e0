--[[ tenant_fix: one step of the tenant parts of the consistency sweep (the janitor) — puts a
queue's tenant bookkeeping back in line with its tasks after keys were removed or edited by hand
(the scripts that move tasks keep it so; nothing here runs on the task paths):
  mode 'active'  one HSCAN step of ``ta``: an entry whose task is no longer active (gone, or in
                 another state) is removed and its tenant's count lowered (includes/priority
                 tenant_left: a tenant held at its concurrency with pending tasks is back in the
                 ring), so no slot stays taken by a task that left
  mode 'ring'    the next ~count tenants with pending tasks (walking ``tq`` by name, one range
                 read per tenant): a tenant missing from the ready ring that is neither paused
                 nor at its concurrency, nor held by a rate still in force (``tw``), is put back
                 at the virtual time (it would never be picked again; one held by a rate it no
                 longer has leaves tw); one at its concurrency has its count checked against its active tasks
                 (the lease zset's tasks and their messages, when it holds at most 2 000: a count
                 raised by hand would hold it for good), its count and ``ta`` entries corrected,
                 and is put back if that frees a slot; a tenant whose pass is PASS_REBASE or more
                 past the virtual time (no turn leaves it there: the rate band of versions before
                 issue 42, 10^15 + a due time) is put back at the virtual time
A tenant put back wakes a worker. An active tenant task missing from ``ta`` is restored by the
``tasks`` part (lua/reconcile.lua) too, without changing the count (an entry removed by hand
leaves the count counting it). A ring entry of a tenant without pending tasks needs no
repair: the dequeue drops it when it meets it.
KEY tasks        tasks hash
KEY @pending
KEY wake         wake-up list idle workers block on
KEY lease        lease zset: the active tasks
KEY tw           the queue's tenants held by their rate: tenant -> ms its next task conforms
ARG mode         'active' or 'ring'
ARG cursor       'active': the HSCAN cursor ('0' starts a pass); 'ring': '0' starts a pass, else
                 'n' followed by the last tenant name walked
ARG count        entries ('active', an HSCAN COUNT hint) or tenants ('ring') per step
Returns {next cursor ('0' = pass done), name1, what1, name2, what2, ...} for each repair (an id
for 'active', a tenant name for 'ring').
Works when Redis is full (maxmemory): it starts with a no-op removal (includes/whenfull).
]]
--- @include "whenfull"
--- @include "signal"
--- @include "stored"
--- @include "priority"
writable_when_full(K.tasks)
local pk = G.pending
local count = tonumber(A.count)
local out = {'0'}
if A.mode == 'active' then
  local page = redis.call('HSCAN', K.ta, A.cursor, 'COUNT', count)
  out[1] = page[1]
  local entries = page[2]
  if #entries == 0 then
    return out
  end
  local ids = {}
  for i = 1, #entries, 2 do
    ids[#ids + 1] = entries[i]
  end
  local vals = redis.call('HMGET', K.tasks, unpack(ids))
  local gone = {}
  for i, id in ipairs(ids) do
    if stored_state(vals[i]) ~= 'a' then
      gone[#gone + 1] = id
      out[#out + 1] = id
      out[#out + 1] = 'counted active for tenant ' .. entries[2 * i] .. ' but ' ..
        (vals[i] and ('in state ' .. stored_state(vals[i])) or 'gone') .. ': slot freed'
    end
  end
  if #gone > 0 and tenant_left(pk, gone) then
    signal(K.wake)
  end
  return out
end
-- 'ring': walk the tenants of tq by name
local from = A.cursor == '0' and '-' or ('[' .. string.match(A.cursor, '^n(.*)$') .. '\1')
local held, back = {}, false
local last = nil
local v = tonumber(redis.call('HGET', K.tn, 'v') or '0')  -- the virtual time
for _ = 1, count do
  local head = redis.call('ZRANGE', K.tq, from, '+', 'BYLEX', 'LIMIT', 0, 1)[1]
  if not head then
    last = nil
    break
  end
  local tenant = string.sub(head, 1, string.find(head, '\0', 1, true) - 1)
  last, from = tenant, '[' .. tenant .. '\1'
  local pass = redis.call('ZSCORE', K.tr, tenant)
  if pass and tonumber(pass) - v >= PASS_REBASE then  -- (no turn leaves a pass that far ahead of V)
    redis.call('ZADD', K.tr, string.format('%.0f', v), tenant)
    back = true
    out[#out + 1] = tenant
    out[#out + 1] = 'its pass was far past the virtual time (an older version\'s rate hold): put back at it'
  elseif not pass then
    local t = redis.call('HMGET', K.tn, 'v', 'l:' .. tenant, 'a:' .. tenant, 'd')
    local _, paused, limit, rate = tenant_settings(t[2], t[4])
    local by_rate = redis.call('ZSCORE', K.tw, tenant)
    if not paused then
      if limit > 0 and (tonumber(t[3]) or 0) >= limit then
        held[#held + 1] = {tenant, limit, tonumber(t[3]) or 0}
      elseif not (by_rate and rate > 0) then
        redis.call('ZADD', K.tr, t[1] or 0, tenant)
        back = true
        out[#out + 1] = tenant
        if by_rate then
          redis.call('ZREM', K.tw, tenant)
          out[#out + 1] = 'held by a rate it no longer has: put back in the ready ring'
        else
          out[#out + 1] = 'had pending tasks but was not in the ready ring: put back'
        end
      end
    end
  end
end
if #held > 0 and redis.call('ZCARD', K.lease) <= 2000 then
  local real, of = {}, {}  -- the held tenants' active tasks: count, and their ids
  for _, h in ipairs(held) do
    real[h[1]], of[h[1]] = 0, {}
  end
  local ids = redis.call('ZRANGE', K.lease, 0, -1)
  local vals = #ids > 0 and redis.call('HMGET', K.tasks, unpack(ids)) or {}
  for i, id in ipairs(ids) do
    local tenant = stored_state(vals[i]) == 'a' and msg_tenant(vals[i], STORED_ACTIVE_AT)
    if tenant and real[tenant] then
      real[tenant] = real[tenant] + 1
      table.insert(of[tenant], id)
    end
  end
  for _, h in ipairs(held) do
    local tenant, limit, counted = h[1], h[2], h[3]
    local n = real[tenant]
    local entries = redis.call('HMGET', K.ta, unpack(of[tenant][1] and of[tenant] or {'-'}))
    for i, id in ipairs(of[tenant]) do
      if not entries[i] then  -- (one removed by hand: the count below counts it)
        redis.call('HSET', K.ta, id, tenant)
      end
    end
    if n ~= counted then
      if n > 0 then
        redis.call('HSET', K.tn, 'a:' .. tenant, n)
      else
        redis.call('HDEL', K.tn, 'a:' .. tenant)
      end
      out[#out + 1] = tenant
      out[#out + 1] = 'counted ' .. counted .. ' active task(s) but ' .. n .. ' run: count corrected'
      if n < limit and tenant_ready(pk, tenant) then
        back = true
      end
    end
  end
end
if back then
  signal(K.wake)
end
if last then
  out[1] = 'n' .. last
end
return out
