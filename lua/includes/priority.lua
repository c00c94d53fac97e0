--- Priorities within a queue: 0 (lowest) to 9 (highest), 5 by default. Pending tasks of the
--- default priority are in the pending list (LPUSH, RPOP: FIFO, O(1)); the others are in the
--- queue's 'prio' zset, in bands of BAND scores, one band per priority, the highest first
--- (band(p) = (9 - p) * BAND), FIFO within a band (the score after the band's last, or before
--- its first for a task put back at the front). Workers take bands 9..6, then the list, then
--- bands 4..0: strict order, O(log N) per task however many wait (scores stay exact doubles:
--- 9 * 2^45 + 2^45 < 2^53).
--- msg_field(m, i, index): where field ``index`` of the message starting at byte i of m starts.
--- msg_priority(m, i): the priority of the message starting at byte i of m. Only a message whose
--- array reaches the priority field (PRIORITY_INDEX, codec.PRIORITY_INDEX: trailing defaults
--- are left out of the encoding) is read past its first bytes, skipping the fields before it
--- (mp_skip: msgpack objects, nesting counted, not recursed); anything unreadable is the default.
--- Tenants (enqueue(..., tenant=); docs/architecture.md "Tenants"): a pending task with a tenant
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
--- pk: a script's pending keys, {pending list, prio zset, tq, tr, tn} (names: pending_keys).
--- push_pending(pk, id, m, i, front): make id, whose message starts at byte i of m, pending at
--- the back (or ``front``) of its priority, within its tenant if it has one.
--- pending_count(pk): how many pending ids (placeholders included), every tenant's counted.
local PRIORITY_INDEX, DEFAULT_PRIORITY = F.priority, 5  -- (F: the loader's field table, core/codec.py)
local BAND = 35184372088832  -- 2^45
local HIGH_END = (9 - DEFAULT_PRIORITY) * BAND  -- scores below it: priorities above the default
-- msgpack type bytes 0xc0..0xdb, one byte each (at b - 0xbf) of a string: a constant, not tables
-- built again on every call of every script that includes this (~17 000 instructions a call).
-- FIXED: the object's size in bytes (0 = not of fixed size); a sized object (str, bin, ext): HEAD
-- its header's bytes, LENB how many of them give its length (0 = not sized)
local FIXED = '\1\0\1\1\0\0\0\0\0\0\5\9\2\3\5\9\2\3\5\9\3\4\6\10\18\0\0\0'
local HEAD = '\0\0\0\0\2\3\5\3\4\6\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\2\3\5'
local LENB = '\0\0\0\0\1\2\4\1\2\4\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1\2\4'
local function mp_uint(m, i, n)
  local v = 0
  for k = i, i + n - 1 do
    local b = string.byte(m, k)
    if not b then return nil end
    v = v * 256 + b
  end
  return v
end
local function mp_skip(m, i)  -- the index after the object starting at i (nil: not msgpack)
  local todo = 1
  while todo > 0 do
    todo = todo - 1
    local b = string.byte(m, i)
    if not b then return nil end
    if b <= 0x7f or b >= 0xe0 then
      i = i + 1
    elseif b <= 0x8f then
      i, todo = i + 1, todo + 2 * (b - 0x80)
    elseif b <= 0x9f then
      i, todo = i + 1, todo + (b - 0x90)
    elseif b <= 0xbf then
      i = i + 1 + (b - 0xa0)
    elseif b <= 0xdb and string.byte(FIXED, b - 0xbf) > 0 then
      i = i + string.byte(FIXED, b - 0xbf)
    elseif b <= 0xdb and string.byte(LENB, b - 0xbf) > 0 then
      local n = mp_uint(m, i + 1, string.byte(LENB, b - 0xbf))
      if not n then return nil end
      i = i + string.byte(HEAD, b - 0xbf) + n
    elseif b == 0xdc or b == 0xde then
      local n = mp_uint(m, i + 1, 2)
      if not n then return nil end
      i, todo = i + 3, todo + n * (b == 0xde and 2 or 1)
    elseif b == 0xdd or b == 0xdf then
      local n = mp_uint(m, i + 1, 4)
      if not n then return nil end
      i, todo = i + 5, todo + n * (b == 0xdf and 2 or 1)
    else
      return nil  -- 0xc1: never used
    end
  end
  return i
end
local function msg_field(m, i, index)  -- where field ``index`` (0-based) of the message at i starts, or nil
  local b, n = string.byte(m, i), 0
  if b and b >= 0x90 and b <= 0x9f then
    n, i = b - 0x90, i + 1
  elseif b == 0xdc then
    n, i = mp_uint(m, i + 1, 2) or 0, i + 3
  end
  if n <= index then  -- (trailing defaults are left out: the array stops before the field)
    return nil
  end
  for _ = 1, index do
    i = mp_skip(m, i)
    if not i then return nil end
  end
  return i
end
local function msg_priority(m, i)
  local at = msg_field(m, i, PRIORITY_INDEX)
  local p = at and string.byte(m, at)
  if p and p <= 9 then  -- a positive fixint
    return p
  end
  return DEFAULT_PRIORITY
end
local RETRY_FRONT_INDEX = F.retry_front
local function msg_retry_front(m, i)  -- the message (at i) asks its retries to go to the front
  local at = msg_field(m, i, RETRY_FRONT_INDEX)
  return at ~= nil and string.byte(m, at) == 0xc3  -- msgpack true
end
local TENANT_INDEX = F.tenant
local SEQ0 = 4503599627370496  -- 2^52: the first seq (front pushes count down from a head)
local function msg_tenant(m, i)  -- the tenant of the message at i, or nil (none: the tenant '')
  local at = msg_field(m, i, TENANT_INDEX)
  local b = at and string.byte(m, at)
  if not b then return nil end
  if b >= 0xa1 and b <= 0xbf then  -- fixstr (a name is 1 to 64 bytes)
    return string.sub(m, at + 1, at + b - 0xa0)
  elseif b == 0xd9 then  -- str8
    local n = string.byte(m, at + 1)
    return n and n > 0 and string.sub(m, at + 2, at + 1 + n) or nil
  end
  return nil
end
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
--- entry can be checked on its own. tenant_left(pk, ids): the exit duty for tasks leaving active
--- (idempotent: an id not in ta is nothing): their entries go, their tenants' counts drop, and a
--- tenant held at its concurrency with pending tasks is back in the ring. Returns true when a
--- tenant came back (the caller wakes a worker).
local function tenant_left(pk, ids)
  local tenants = redis.call('HMGET', pk[6], unpack(ids))
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
  redis.call('ZADD', pk[3], 0, tenant_member(tenant, p, seq, id))
  tenant_ready(pk, tenant)
end
local function push_pending(pk, id, m, i, front)
  local list, pq, p = pk[1], pk[2], msg_priority(m, i)
  local tenant = msg_tenant(m, i)
  if tenant then
    return tenant_push(pk, tenant, id, p, front)
  end
  if p == DEFAULT_PRIORITY then
    if front then
      redis.call('RPUSH', list, id)
    else
      redis.call('LPUSH', list, id)
    end
    return
  end
  local lo = (9 - p) * BAND
  local lo_s, hi_s = string.format('%.0f', lo), '(' .. string.format('%.0f', lo + BAND)
  local edge
  if front then
    edge = redis.call('ZRANGE', pq, lo_s, hi_s, 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')[2]
  else
    edge = redis.call('ZRANGE', pq, hi_s, lo_s, 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')[2]
  end
  local score = lo + BAND / 2
  if edge then
    score = tonumber(edge) + (front and -1 or 1)
  end
  redis.call('ZADD', pq, string.format('%.0f', score), id)
end
local function pending_count(pk)
  return redis.call('LLEN', pk[1]) + redis.call('ZCARD', pk[2]) + (pk[3] and redis.call('ZCARD', pk[3]) or 0)
end
--- push_many(pk, ids, vals): push_pending for a batch of stored values (state byte first), in
--- order (one LPUSH for the default priority, one ZADD per other priority present; a tenant's
--- tasks one by one).
local function push_many(pk, ids, vals)
  local list, pq = pk[1], pk[2]
  local plain, by = {}, {}
  for n, id in ipairs(ids) do
    local p = msg_priority(vals[n], 2)
    local tenant = msg_tenant(vals[n], 2)
    if tenant then
      tenant_push(pk, tenant, id, p, false)
    elseif p == DEFAULT_PRIORITY then
      plain[#plain + 1] = id
    else
      by[p] = by[p] or {}
      table.insert(by[p], id)
    end
  end
  if #plain > 0 then
    redis.call('LPUSH', list, unpack(plain))
  end
  for p, members in pairs(by) do
    local lo = (9 - p) * BAND
    local edge = redis.call('ZRANGE', pq, '(' .. string.format('%.0f', lo + BAND), string.format('%.0f', lo),
      'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')[2]
    local score = edge and tonumber(edge) or lo + BAND / 2 - 1
    local args = {}
    for _, id in ipairs(members) do
      score = score + 1
      args[#args + 1] = string.format('%.0f', score)
      args[#args + 1] = id
    end
    redis.call('ZADD', pq, unpack(args))
  end
end
