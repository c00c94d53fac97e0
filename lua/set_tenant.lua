--[[ set_tenant: change one tenant's settings in a queue (weight, paused, concurrency, rate), or
the queue's defaults for its tenants (weight, concurrency, rate), by an operator
A tenant's settings are the queue's tenant hash field 'l:<tenant>' = 'weight paused concurrency'
and, with a rate, ' rate burst' (absent = weight 1, running, no concurrency limit: nothing is kept for a tenant with the
defaults; field 'o' counts the tenants that have settings, so a dequeue reads settings only when
some tenant has them). Then the tenant's place in the ready ring is made to agree with them: a
paused tenant, or one with as many active tasks as its concurrency, is out of the ring (its
pending tasks stay, in order, and wait: the exit of one of its tasks puts it back); a running
tenant under its limit with pending tasks is in the ring (one that comes back enters at the
queue's virtual time, as a tenant that gets work does, and one worker is woken). A weight acts from
the tenant's next turn: its pass grows by 1000 / weight a turn. A lowered concurrency lets the
tasks running finish (none is stopped). The defaults (tenant '', field 'd') apply to every tenant
without settings of its own, lazily: at its next turn, push or exit (never a scan of tenants; a
raised default puts a tenant it held back in the ring at the end of one of its tasks).
KEY tq        the queue's tenant zset (includes/priority)
KEY tr        the queue's ready ring of tenants
KEY tn        the queue's tenant hash
KEY wake      wake-up list idle workers block on
KEY ta      the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEY tw      the queue's tenants held by their rate: tenant -> ms its next task conforms (includes/priority)
ARG tenant      the tenant's name ('' = the queue's defaults: no pause, the ring untouched)
ARG weight      1..100, '' = unchanged
ARG paused      '1' pause, '0' resume, '' = unchanged
ARG clear       '1' = back to the defaults (weight 1, running, no limit; the others ignored)
ARG concurrency      at most this many of the tenant's tasks active at once (0 = no limit), '' = unchanged
ARG rate         tasks a second the tenant's tasks start at most (0 = no limit), '' = unchanged; a
                 changed rate starts with a full bucket; a tenant held by its rate (``tw``,
                 includes/priority) whose rate changes is back in the round at once; a changed
                 default rate wakes a worker, whose dequeue puts back the tenants held by a rate
                 they no longer have (those of tw's head at once, the others by their due time)
ARG burst        tasks the rate lets start at once (>= 1), '' = unchanged
Returns {weight, paused (0/1), pending tasks of the tenant, in the ring and taking turns (0/1),
concurrency, active, rate, burst}.
]]
--- @include "signal"
--- @include "priority"
--- @include "operator"
operator_only(K.tn)  -- a producer is refused here, before any write
local tenant = A.tenant
local function encode(weight, paused, limit, rate, burst)
  local l = weight .. ' ' .. (paused and '1' or '0') .. ' ' .. limit
  if rate > 0 then
    l = l .. ' ' .. tostring(rate) .. ' ' .. burst
  end
  return l
end
local function rate_of(rate, burst)  -- the rate and burst asked, over those in force
  return A.rate ~= '' and tonumber(A.rate) or rate, A.burst ~= '' and tonumber(A.burst) or burst
end
if tenant == '' then  -- the queue's defaults ('d'): every tenant without settings of its own
  local weight, _, limit, rate, burst = tenant_settings(redis.call('HGET', K.tn, 'd'))
  if A.clear == '1' then
    weight, limit, rate, burst = 1, 0, 0, 1
  else
    weight = A.weight ~= '' and tonumber(A.weight) or weight
    limit = A.concurrency ~= '' and tonumber(A.concurrency) or limit
    rate, burst = rate_of(rate, burst)
  end
  local _, _, _, old_rate, old_burst = tenant_settings(redis.call('HGET', K.tn, 'd'))
  if weight == 1 and limit == 0 and rate == 0 then
    redis.call('HDEL', K.tn, 'd')
  else
    redis.call('HSET', K.tn, 'd', encode(weight, false, limit, rate, burst))
  end
  if (rate ~= old_rate or burst ~= old_burst) and redis.call('EXISTS', K.tw) == 1 then
    signal(K.wake)  -- tenants held by the old default rate: a worker's dequeue looks at them again
  end
  return {weight, 0, 0, 0, limit, 0, tostring(rate), burst}
end
local field = 'l:' .. tenant
local cur = redis.call('HGET', K.tn, field)
local defaults = redis.call('HGET', K.tn, 'd')
-- (a tenant's own settings replace the defaults whole: a change starts from what is in force)
local weight, paused, limit, rate, burst = tenant_settings(cur, defaults)
local old_rate, old_burst = rate, burst
if A.clear == '1' then
  weight, paused, limit, rate, burst = 1, false, 0, 0, 1
else
  rate, burst = rate_of(rate, burst)
  if A.concurrency ~= '' then
    limit = tonumber(A.concurrency)
  end
  if A.weight ~= '' then
    weight = tonumber(A.weight)
  end
  if A.paused ~= '' then
    paused = A.paused == '1'
  end
end
if A.clear == '1' or (weight == 1 and not paused and limit == 0 and rate == 0 and not defaults) then
  if cur then
    redis.call('HDEL', K.tn, field)
    if redis.call('HINCRBY', K.tn, 'o', -1) <= 0 then
      redis.call('HDEL', K.tn, 'o')
    end
  end
else
  if not cur then
    redis.call('HINCRBY', K.tn, 'o', 1)
  end
  redis.call('HSET', K.tn, field, encode(weight, paused, limit, rate, burst))
end
if A.clear == '1' then  -- (cleared: the defaults are in force again)
  weight, paused, limit, rate, burst = tenant_settings(nil, defaults)
end
if rate ~= old_rate or burst ~= old_burst then  -- a new rate: a full bucket, and no hold by the old one
  redis.call('HDEL', K.tn, 'k:' .. tenant)
  redis.call('ZREM', K.tw, tenant)
end
local lo, hi = '[' .. tenant .. '\0', '(' .. tenant .. '\1'
local pending = redis.call('ZLEXCOUNT', K.tq, lo, hi)
local pk = {false, false, K.tq, K.tr, K.tn, K.ta}
local active = tonumber(redis.call('HGET', K.tn, 'a:' .. tenant) or '0')
if paused or (limit > 0 and active >= limit) then
  redis.call('ZREM', K.tr, tenant)
  redis.call('ZREM', K.tw, tenant)  -- (not held by its rate either: the exit of a task or a resume puts it back)
elseif pending > 0 and tenant_ready(pk, tenant) then
  signal(K.wake)
end
local ready = redis.call('ZSCORE', K.tr, tenant) and not redis.call('ZSCORE', K.tw, tenant)
return {weight, paused and 1 or 0, pending, ready and 1 or 0, limit, active,
        tostring(rate), burst}
