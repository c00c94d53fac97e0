--[[ tenants: read one page of a queue's tenants that have pending tasks (read-only)
Tenants come in name order, found in the tenant zset itself (each tenant's tasks are one range:
one ZRANGE BYLEX finds the next tenant, one ZLEXCOUNT counts its tasks), so a page of n tenants
costs O(n log N) whatever their number; nothing else is kept per tenant.
KEYS[1] tq    the queue's tenant zset (includes/priority)
KEYS[2] tr    the queue's ready ring of tenants
KEYS[3] tn    the queue's tenant hash (the tenants' settings)
KEYS[4] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
ARGV[1] after   the page starts after this tenant ('' = at the first)
ARGV[2] count   tenants per page at most
Returns {tenant, pending, pass ('' = not in the ring: paused, held at its concurrency or by its rate), settings
('weight paused concurrency': its own, else the queue's defaults, else ''), active, ...}:
the page is full when it has ``count`` tenants (then call again after its last).
]]
local out = {}
local defaults = redis.call('HGET', KEYS[3], 'd')
local from = ARGV[1] == '' and '-' or '(' .. ARGV[1] .. '\1'
for _ = 1, tonumber(ARGV[2]) do
  local m = redis.call('ZRANGE', KEYS[1], from, '+', 'BYLEX', 'LIMIT', 0, 1)[1]
  if not m then
    break
  end
  local tenant = string.sub(m, 1, string.find(m, '\0', 1, true) - 1)
  out[#out + 1] = tenant
  out[#out + 1] = redis.call('ZLEXCOUNT', KEYS[1], '[' .. tenant .. '\0', '(' .. tenant .. '\1')
  out[#out + 1] = redis.call('ZSCORE', KEYS[2], tenant) or ''
  local t = redis.call('HMGET', KEYS[3], 'l:' .. tenant, 'a:' .. tenant)
  out[#out + 1] = t[1] or defaults or ''
  out[#out + 1] = tonumber(t[2] or '0')
  from = '(' .. tenant .. '\1'
end
return out
