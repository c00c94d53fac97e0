--- Priorities within a queue: 0 (lowest) to 9 (highest), 5 by default. Pending tasks of the
--- default priority are in the pending list (LPUSH, RPOP: FIFO, O(1)); the others are in the
--- queue's 'prio' zset, in bands of BAND scores, one band per priority, the highest first
--- (band(p) = (9 - p) * BAND), FIFO within a band (the score after the band's last, or before
--- its first for a task put back at the front). Workers take bands 9..6, then the list, then
--- bands 4..0: strict order, O(log N) per task however many wait (scores stay exact doubles:
--- 9 * 2^45 + 2^45 < 2^53).
--- pk: a script's pending keys, {pending list, prio zset, tq, tr, tn} (names: pending_keys).
--- push_pending(pk, id, m, i, front): make id, whose message starts at byte i of m, pending at
--- the back (or ``front``) of its priority, within its tenant if it has one (both read in one walk
--- of the message); returns the tenant (nil: none).
--- push_at(pk, id, p, tenant, front): the same, the message's priority and tenant (nil: none) read.
--- pending_count(pk): how many pending ids (placeholders included), every tenant's counted.
--- Message fields: includes/msgfield; tenants: includes/tenant.
--- @include "msgfield"
--- @include "tenant"
local BAND = 35184372088832  -- 2^45
local HIGH_END = (9 - DEFAULT_PRIORITY) * BAND  -- scores below it: priorities above the default
--- The guard of a band's edge (docs/internals-scripts.md "Bands and sentinels"): a score one step past
--- the end of its band would sort with the next priority, so a push that would cross (2^44 pushes
--- at one end while the band never empties) first spreads the band's members again around its
--- middle, in order (push_pending; push_many pushes such a batch one by one through it).
local function push_at(pk, id, p, tenant, front)
  local list, pq = pk[1], pk[2]
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
    if score < lo or score >= lo + BAND then  -- past its band's end: the band spread again first, in order
      local all = redis.call('ZRANGE', pq, lo_s, hi_s, 'BYSCORE')
      local first = lo + BAND / 2 - math.floor(#all / 2)
      for c = 1, #all, 1000 do  -- (chunks: unpack's limit)
        local args = {}
        for k = c, math.min(c + 999, #all) do
          args[#args + 1], args[#args + 2] = string.format('%.0f', first + k - 1), all[k]
        end
        redis.call('ZADD', pq, unpack(args))
      end
      score = front and first - 1 or first + #all
    end
  end
  redis.call('ZADD', pq, string.format('%.0f', score), id)
end
local function push_pending(pk, id, m, i, front)  -- returns the message's tenant (nil: none)
  local p, tenant = msg_priority_tenant(m, i)
  push_at(pk, id, p, tenant, front)
  return tenant
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
    local p, tenant = msg_priority_tenant(vals[n], 2)
    if tenant then
      tenant_push(pk, tenant, id, p, false)
    elseif p == DEFAULT_PRIORITY then
      plain[#plain + 1] = id
    else
      by[p] = by[p] or {}
      table.insert(by[p], n)
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
    if score + #members >= lo + BAND then  -- past its band's end: one by one (push_pending spreads the band)
      for _, n in ipairs(members) do
        push_pending(pk, ids[n], vals[n], 2, false)
      end
    else
      local args = {}
      for _, n in ipairs(members) do
        score = score + 1
        args[#args + 1] = string.format('%.0f', score)
        args[#args + 1] = ids[n]
      end
      redis.call('ZADD', pq, unpack(args))
    end
  end
end
