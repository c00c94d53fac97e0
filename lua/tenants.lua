--[[ tenants: read one page of a queue's tenants that have pending tasks (read-only)
Tenants come in name order, found in the tenant zset itself (each tenant's tasks are one range:
one ZRANGE BYLEX finds the next tenant, one ZLEXCOUNT counts its tasks), so a page of n tenants
costs O(n log N) whatever their number; nothing else is kept per tenant.
KEY tq        the queue's tenant zset (includes/priority)
KEY tr        the queue's ready ring of tenants
KEY tn        the queue's tenant hash (the tenants' settings)
KEY ta      the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARG after       the page starts after this tenant ('' = at the first)
ARG count       tenants per page at most
Returns {tenant, pending, pass ('' = not in the ring: paused, held at its concurrency or by its rate), settings
('weight paused concurrency': its own, else the queue's defaults, else ''), active, ...}:
the page is full when it has ``count`` tenants (then call again after its last).
]]
local out = {}
local defaults = redis.call('HGET', K.tn, 'd')
local from = A.after == '' and '-' or '(' .. A.after .. '\1'
for _ = 1, tonumber(A.count) do
  local m = redis.call('ZRANGE', K.tq, from, '+', 'BYLEX', 'LIMIT', 0, 1)[1]
  if not m then
    break
  end
  local tenant = string.sub(m, 1, string.find(m, '\0', 1, true) - 1)
  out[#out + 1] = tenant
  out[#out + 1] = redis.call('ZLEXCOUNT', K.tq, '[' .. tenant .. '\0', '(' .. tenant .. '\1')
  out[#out + 1] = redis.call('ZSCORE', K.tr, tenant) or ''
  local t = redis.call('HMGET', K.tn, 'l:' .. tenant, 'a:' .. tenant)
  out[#out + 1] = t[1] or defaults or ''
  out[#out + 1] = tonumber(t[2] or '0')
  from = '(' .. tenant .. '\1'
end
return out
