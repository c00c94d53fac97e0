--- Tenants (enqueue(..., tenant=); docs/internals-tenants.md "Tenants"): a pending task with a tenant
--- (msg_tenant) is not in the list or the prio zset but in the queue's tenant zset ``tq`` (scores
--- all 0, ordered by member: ``T \0 band seq id``, band = '0' + (9 - priority) so the highest
--- priority comes first, seq 16 decimal digits from the counter 'q' of the tenant hash ``tn``,
--- starting at 2^52; a push to the front takes the head's seq - 1): a tenant's tasks are one
--- contiguous range, read in O(log N). A tenant with pending tasks is in the ready ring ``tr``
--- (zset: tenant -> pass); it enters at the queue's virtual time (``tn`` field 'v', the last
--- pick's pass), unless paused. A tenant's settings are ``tn`` field 'l:<tenant>', 'weight paused
--- concurrency' (absent: the queue's defaults 'd', else weight 1, running, no limit; 'o' counts the
--- tenants that have settings). The tasks without a tenant are the tenant '' (in the ring while
--- any wait, put there by the dequeue: their push sites need no ring logic).
--- tenant_settings(l, d), tenant_ready(pk, tenant), tenant_push(pk, tenant, id, p, front): below.
local SEQ0 = 4503599627370496  -- 2^52: the first seq (front pushes count down from a head)
local SEQ_MIN, SEQ_END = 1e15, 1e16  -- a seq has 16 digits (the members sort by it): tenant_push renumbers
local function tenant_band(p)  -- the band byte of priority p: the highest priority sorts first
  return string.char(57 - p)
end
local function tenant_member(tenant, p, seq, id)
  return tenant .. '\0' .. tenant_band(p) .. string.format('%016.0f', seq) .. id
end
local function tenant_settings(l, d)  -- 'l:<tenant>' in tn, 'weight paused concurrency [rate burst]' (else
  l = l or d                          -- the queue's defaults, tn 'd'): weight, paused, concurrency, rate, burst
  if not l then
    return 1, false, 0, 0, 1
  end
  local w, p, c, r, b = string.match(l, '^(%d+) (%d) ?(%d*) ?([%d%.]*) ?(%d*)$')
  return tonumber(w) or 1, p == '1', tonumber(c) or 0, tonumber(r) or 0, tonumber(b) or 1
end
--- A tenant's rate (``r`` tasks a second, with bursts of up to ``b``): a virtual schedule (GCRA),
--- tn field 'k:<tenant>' = TAT, the ms from which its next task conforms once its burst is used
--- ('kb': the names of the tenants that have one, each between NUL bytes). n tasks may start at
--- ``now`` while now >= TAT + (n - b) * T (T = 1000 / r ms); taking them moves TAT to
--- max(TAT, now - L) + n * T. L (half an interval, at most 100 ms) keeps the time a worker came
--- late for a task, so the rate is kept though dequeues come between due times (a tenant with
--- no schedule yet starts from now, without it): the n-th start after the rate was set is never
--- before (n - b) * T. A tenant with no task allowed now is out of the ring, in the queue's
--- zset of tenants held by their rate ``tw`` (tenant -> the ms its next task conforms: a key of its
--- own, never a band of the ring's passes), and the dequeue puts it back at V once that time came
--- or its rate went. A 'k:' field whose TAT is
--- behind now - L says nothing more than none: dropped when the queue has no tenant work
--- (tenant_rest).
--- Passes (the ring's scores) are only ever passes: the dequeue rebases them (every pass and V
--- less V) when V reaches PASS_REBASE, so they stay exact doubles however long tenant work lasts.
local PASS_REBASE = 281474976710656  -- 2^48: ~2.8 * 10^11 turns of weight 1 (65 days at 50 000 a second)
local function tenant_rate(k, r, b, now)  -- tasks allowed now, and the schedule they start from
  local t, tat = 1000 / r, tonumber(k or '')
  local eff = tat and math.max(tat, now - math.min(t / 2, 100)) or now  -- (none yet: from now, no credit)
  return b + math.floor((now - eff) / t), eff
end
local function tenant_rate_due(tat, r, b)  -- when its next task conforms (its score in tw while held by its rate)
  return tat - (b - 1) * 1000 / r
end
local function tenant_rest(tn, now)  -- no tenant has work: the virtual time, seq and the rate schedules
  redis.call('HDEL', tn, 'v', 'q')     -- that say nothing more go (a tenant's settings stay; a schedule
  if not now or redis.call('HEXISTS', tn, 'kb') == 0 then  -- still ahead stays, so a tenant that gets work
    return                                                 -- again at once does not start afresh; now
  end                                                      -- nil: an operator's, kept)
  local names, fields = {}, {}
  for name in string.gmatch(redis.call('HGET', tn, 'kb') or '', '[^%z]+') do
    names[#names + 1] = name
    fields[#fields + 1], fields[#fields + 2] = 'k:' .. name, 'l:' .. name
  end
  fields[#fields + 1] = 'd'
  local got = redis.call('HMGET', tn, unpack(fields))
  local gone, kept = {}, '\0'
  for i = 1, #names do
    local _, _, _, r, b = tenant_settings(got[2 * i], got[#got])
    if r <= 0 or tonumber(got[2 * i - 1] or '0') <= now - math.min(500 / r, 100) then
      gone[#gone + 1] = fields[2 * i - 1]
    else
      kept = kept .. names[i] .. '\0'
    end
  end
  if #gone > 0 then
    redis.call('HDEL', tn, unpack(gone))
  end
  if kept == '\0' then
    redis.call('HDEL', tn, 'kb')
  else
    redis.call('HSET', tn, 'kb', kept)
  end
end
local function tenant_rate_set(tn, name, tat)  -- keep a tenant's schedule (and its name in 'kb')
  local kb = redis.call('HGET', tn, 'kb') or '\0'
  if not string.find(kb, '\0' .. name .. '\0', 1, true) then
    kb = kb .. name .. '\0'
  end
  redis.call('HSET', tn, 'k:' .. name, string.format('%.3f', tat), 'kb', kb)
end
-- (A tenant held by its rate is in tw, which pk does not name: tenant_ready may put it back at V; the
-- dequeue that meets it finds no task allowed and holds it again.)
local function tenant_ready(pk, tenant)  -- tenant has pending tasks: in the ring (at V when it was not), unless
  if redis.call('ZSCORE', pk[4], tenant) then  -- paused or at its concurrency (held). Returns true if it entered
    return false
  end
  local t = redis.call('HMGET', pk[5], 'v', 'l:' .. tenant, 'a:' .. tenant, 'd')
  local _, paused, limit = tenant_settings(t[2], t[4])
  if paused or (limit > 0 and (tonumber(t[3]) or 0) >= limit) then
    return false
  end
  redis.call('ZADD', pk[4], t[1] or 0, tenant)
  return true
end
--- Active tenant tasks (a tenant's concurrency): pk[6] ``ta`` (hash id -> tenant) holds each
--- active task of a tenant, and ``tn`` field 'a:<tenant>' counts them; both change in the script
--- that moves the task (the dequeue in, every way out of active through includes/exit), so an
--- entry can be checked on its own. tenant_left(pk, ids, known): the exit duty for tasks leaving active
--- (idempotent: an id not in ta is nothing): their entries go, their tenants' counts drop, and a
--- tenant held at its concurrency with pending tasks is back in the ring (``known``: ta's answer
--- for ``ids``, read by the caller in this script, or nil). Returns true when a tenant came back
--- (the caller wakes a worker).
local function tenant_left(pk, ids, known)
  local tenants = known or redis.call('HMGET', pk[6], unpack(ids))
  local per, gone = {}, {}
  for i, tenant in ipairs(tenants) do
    if tenant then
      per[tenant] = (per[tenant] or 0) + 1
      gone[#gone + 1] = ids[i]
    end
  end
  if #gone == 0 then
    return false
  end
  redis.call('HDEL', pk[6], unpack(gone))
  local back = false
  for tenant, n in pairs(per) do
    if redis.call('HINCRBY', pk[5], 'a:' .. tenant, -n) <= 0 then
      redis.call('HDEL', pk[5], 'a:' .. tenant)
    end
    if redis.call('ZRANGE', pk[3], '[' .. tenant .. '\0', '(' .. tenant .. '\1', 'BYLEX', 'LIMIT', 0, 1)[1]
        and tenant_ready(pk, tenant) then
      back = true
    end
  end
  return back
end
--- The guard of the seq's 16 digits (docs/internals-scripts.md "Bands and sentinels"): a push whose
--- seq would leave them (~10^15 pushes with tenant work all along: 'q' starts again when none is
--- left) first gives every pending tenant task a new seq, SEQ0 + its place, in order ('q' = their
--- count; tenant_push). An operator's hint (a seq it located) may then be stale: not found, it
--- looks again.
local function tenant_push(pk, tenant, id, p, front)
  if not pk[5] then
    return error('asynqpy: a tenant task made pending by a script that does not name the tenant keys')
  end
  local seq
  if front then  -- before the head of its band
    local head = redis.call('ZRANGE', pk[3], '[' .. tenant .. '\0' .. tenant_band(p),
      '(' .. tenant .. '\0' .. string.char(58 - p), 'BYLEX', 'LIMIT', 0, 1)[1]
    seq = head and tonumber(string.sub(head, #tenant + 3, #tenant + 18)) - 1
  end
  seq = seq or SEQ0 + redis.call('HINCRBY', pk[5], 'q', 1)
  if seq < SEQ_MIN or seq >= SEQ_END then  -- its 16 digits would not hold: every seq anew first, in order
    local all = redis.call('ZRANGE', pk[3], 0, -1)
    for c = 1, #all, 1000 do  -- (chunks: unpack's limit)
      local add = {}
      for k = c, math.min(c + 999, #all) do
        local m = all[k]
        local nul = string.find(m, '\0', 1, true)
        add[#add + 1], add[#add + 2] = 0, string.sub(m, 1, nul + 1) .. string.format('%016.0f', SEQ0 + k)
          .. string.sub(m, nul + 18)
      end
      redis.call('ZREM', pk[3], unpack(all, c, math.min(c + 999, #all)))
      redis.call('ZADD', pk[3], unpack(add))
    end
    redis.call('HSET', pk[5], 'q', #all)
    return tenant_push(pk, tenant, id, p, front)
  end
  redis.call('ZADD', pk[3], 0, tenant_member(tenant, p, seq, id))
  tenant_ready(pk, tenant)
end
