--[[ stats: read one or more queues' counts per state, counters and oldest pending task, each queue
in one atomic snapshot (read-only; O(1) per queue: LLEN/ZCARD/MGET, a look at the last few pending
ids, and when asked a sampled MEMORY USAGE of seven keys). The Inspector reads up to 50 queues per
call (on a Cluster, queues of one slot: every key of a call in one slot).
KEY pending       pending list
KEY lease         lease zset
KEY scheduled      scheduled zset
KEY retry         retry zset
KEY archived      archived zset
KEY completed      completed zset
KEY paused        paused flag
KEY processed      lifetime processed counter
KEY failed        lifetime failed counter
KEY processed_day       today's processed counter
KEY failed_day       today's failed counter
KEY tasks          tasks hash (to read the oldest pending task)
KEY trimmed        lifetime count of archived tasks deleted by the archive limits
KEY aggregating       counter of the tasks in aggregation groups
KEY groups         the queue's aggregation groups (zset)
KEY prio           pending ids of priorities other than the default (zset, counted as pending)
KEY targeted       targeted tasks (zset, includes/runs)
KEY waiting        tasks waiting on parents (zset, includes/flow)
KEY blocked        tasks waiting behind their key (zset, includes/serial)
KEY tq       the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEY tr       the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEY tn       the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEY ta       the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEY conf     the queue's settings hash (its cap and the cap's counters: includes/cap)
KEY more...        the keys of further queues, 24 per queue in the order above
ARG now          '' = Redis time; else a simulated time in ms
ARG samples      0 = no memory reading; n > 0: each queue's memory, the sum of MEMORY USAGE ... SAMPLES n
                 of its tasks hash, pending list, state zsets and tenant zset (keys 12, 1, 2, 3, 4, 5, 6, 20)
Returns 24 values per queue, in KEYS order: {pending, active, scheduled, retry, archived, completed,
paused (0/1), processed, failed, processed_today, failed_today, trimmed, now, oldest, aggregating,
groups, targeted, waiting, blocked, memory, tenants, cap, rejected, dropped}: cap = the queue's
cap ('N r' or 'N d', includes/cap; false when none), rejected and dropped its caps' counters; pending counts every tenant's tasks;
tenants = how many tenants have pending tasks (the ready ring, less the tenant '' of the tasks
without one);
oldest = the stored value of the oldest pending task of the default priority (the right end of the
list; the last 10 ids are looked at, skipping placeholders of removed tasks), or, when none, of the
next task of another priority, or the first of the tenant zset; false when none. memory = bytes, or false when not asked or when
Redis refuses MEMORY (an ACL, a managed Redis).
]]
--- @include "now"
local now = now_ms(A.now)
local samples = tonumber(A.samples) or 0
local MEMORY_KEYS = {12, 1, 2, 3, 4, 5, 6, 20}

local function oldest_of(o, llen, nprio)
  if llen > 0 then
    local tail = redis.call('LRANGE', KV[o + 1], -10, -1)
    for i = #tail, 1, -1 do
      if tail[i] ~= '' then
        local stored = redis.call('HGET', KV[o + 12], tail[i])
        if stored then
          return stored
        end
      end
    end
  end
  if nprio > 0 then
    local next_id = redis.call('ZRANGE', KV[o + 16], 0, 0)[1]
    if next_id then
      return redis.call('HGET', KV[o + 12], next_id)
    end
  end
  local member = redis.call('ZRANGE', KV[o + 20], 0, 0)[1]  -- (T \0 band seq id: the id after 18 bytes)
  if member then
    local at = string.find(member, '\0', 1, true)
    return redis.call('HGET', KV[o + 12], string.sub(member, at + 18))
  end
  return false
end

local function memory_of(o)
  if samples <= 0 then
    return false
  end
  local total = 0
  for _, k in ipairs(MEMORY_KEYS) do
    local used = redis.pcall('MEMORY', 'USAGE', KV[o + k], 'SAMPLES', samples)
    if type(used) == 'table' and used.err then
      return false
    end
    total = total + (used or 0)
  end
  return total
end

local function int(v)
  return tonumber(v or '0')
end

local out = {}
for o = 0, #KV - 24, 24 do
  local llen, nprio = redis.call('LLEN', KV[o + 1]), redis.call('ZCARD', KV[o + 16])
  local c = redis.call('MGET', KV[o + 7], KV[o + 8], KV[o + 9], KV[o + 10], KV[o + 11], KV[o + 13],
                       KV[o + 14])
  local n = #out
  out[n + 1] = llen + nprio + redis.call('ZCARD', KV[o + 20])
  out[n + 2] = redis.call('ZCARD', KV[o + 2])
  out[n + 3] = redis.call('ZCARD', KV[o + 3])
  out[n + 4] = redis.call('ZCARD', KV[o + 4])
  out[n + 5] = redis.call('ZCARD', KV[o + 5])
  out[n + 6] = redis.call('ZCARD', KV[o + 6])
  out[n + 7] = c[1] and 1 or 0
  out[n + 8] = int(c[2])
  out[n + 9] = int(c[3])
  out[n + 10] = int(c[4])
  out[n + 11] = int(c[5])
  out[n + 12] = int(c[6])
  out[n + 13] = now
  out[n + 14] = oldest_of(o, llen, nprio)
  out[n + 15] = int(c[7])
  out[n + 16] = redis.call('ZCARD', KV[o + 15])
  out[n + 17] = redis.call('ZCARD', KV[o + 17])
  out[n + 18] = redis.call('ZCARD', KV[o + 18])
  out[n + 19] = redis.call('ZCARD', KV[o + 19])
  out[n + 20] = memory_of(o)
  local ring = redis.call('ZCARD', KV[o + 21])
  out[n + 21] = ring > 0 and ring - (redis.call('ZSCORE', KV[o + 21], '') and 1 or 0) or 0
  local cap = redis.call('HMGET', KV[o + 24], 'cap', 'cap_rejected', 'cap_dropped')
  out[n + 22], out[n + 23], out[n + 24] = cap[1] or false, int(cap[2]), int(cap[3])
end
return out
