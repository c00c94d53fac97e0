--[[ stats: read one or more queues' counts per state, counters and oldest pending task, each queue
in one atomic snapshot (read-only; O(1) per queue: LLEN/ZCARD/MGET, a look at the last few pending
ids, and when asked a sampled MEMORY USAGE of seven keys). The Inspector reads up to 50 queues per
call (on a Cluster, queues of one slot: every key of a call in one slot).
KEYS[1] pending   pending list
KEYS[2] lease     lease zset
KEYS[3] scheduled  scheduled zset
KEYS[4] retry     retry zset
KEYS[5] archived  archived zset
KEYS[6] completed  completed zset
KEYS[7] paused    paused flag
KEYS[8] processed  lifetime processed counter
KEYS[9] failed    lifetime failed counter
KEYS[10] processed_day  today's processed counter
KEYS[11] failed_day  today's failed counter
KEYS[12] tasks     tasks hash (to read the oldest pending task)
KEYS[13] trimmed   lifetime count of archived tasks deleted by the archive limits
KEYS[14] aggregating  counter of the tasks in aggregation groups
KEYS[15] groups    the queue's aggregation groups (zset)
KEYS[16] prio      pending ids of priorities other than the default (zset, counted as pending)
KEYS[17] targeted  targeted tasks (zset, includes/runs)
KEYS[18] waiting   tasks waiting on parents (zset, includes/flow)
KEYS[19] blocked   tasks waiting behind their key (zset, includes/serial)
KEYS[20] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[21] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[22] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[23] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEYS[24..] more    the keys of further queues, 23 per queue in the order above
ARGV[1] now      '' = Redis time; else a simulated time in ms
ARGV[2] samples  0 = no memory reading; n > 0: each queue's memory, the sum of MEMORY USAGE ... SAMPLES n
                 of its tasks hash, pending list, state zsets and tenant zset (keys 12, 1, 2, 3, 4, 5, 6, 20)
Returns 21 values per queue, in KEYS order: {pending, active, scheduled, retry, archived, completed,
paused (0/1), processed, failed, processed_today, failed_today, trimmed, now, oldest, aggregating,
groups, targeted, waiting, blocked, memory, tenants}: pending counts every tenant's tasks;
tenants = how many tenants have pending tasks (the ready ring, less the tenant '' of the tasks
without one);
oldest = the stored value of the oldest pending task of the default priority (the right end of the
list; the last 10 ids are looked at, skipping placeholders of removed tasks), or, when none, of the
next task of another priority, or the first of the tenant zset; false when none. memory = bytes, or false when not asked or when
Redis refuses MEMORY (an ACL, a managed Redis).
]]
--- @include "now"
local now = now_ms(ARGV[1])
local samples = tonumber(ARGV[2]) or 0
local MEMORY_KEYS = {12, 1, 2, 3, 4, 5, 6, 20}

local function oldest_of(o, llen, nprio)
  if llen > 0 then
    local tail = redis.call('LRANGE', KEYS[o + 1], -10, -1)
    for i = #tail, 1, -1 do
      if tail[i] ~= '' then
        local stored = redis.call('HGET', KEYS[o + 12], tail[i])
        if stored then
          return stored
        end
      end
    end
  end
  if nprio > 0 then
    local next_id = redis.call('ZRANGE', KEYS[o + 16], 0, 0)[1]
    if next_id then
      return redis.call('HGET', KEYS[o + 12], next_id)
    end
  end
  local member = redis.call('ZRANGE', KEYS[o + 20], 0, 0)[1]  -- (T \0 band seq id: the id after 18 bytes)
  if member then
    local at = string.find(member, '\0', 1, true)
    return redis.call('HGET', KEYS[o + 12], string.sub(member, at + 18))
  end
  return false
end

local function memory_of(o)
  if samples <= 0 then
    return false
  end
  local total = 0
  for _, k in ipairs(MEMORY_KEYS) do
    local used = redis.pcall('MEMORY', 'USAGE', KEYS[o + k], 'SAMPLES', samples)
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
for o = 0, #KEYS - 23, 23 do
  local llen, nprio = redis.call('LLEN', KEYS[o + 1]), redis.call('ZCARD', KEYS[o + 16])
  local c = redis.call('MGET', KEYS[o + 7], KEYS[o + 8], KEYS[o + 9], KEYS[o + 10], KEYS[o + 11], KEYS[o + 13],
                       KEYS[o + 14])
  local n = #out
  out[n + 1] = llen + nprio + redis.call('ZCARD', KEYS[o + 20])
  out[n + 2] = redis.call('ZCARD', KEYS[o + 2])
  out[n + 3] = redis.call('ZCARD', KEYS[o + 3])
  out[n + 4] = redis.call('ZCARD', KEYS[o + 4])
  out[n + 5] = redis.call('ZCARD', KEYS[o + 5])
  out[n + 6] = redis.call('ZCARD', KEYS[o + 6])
  out[n + 7] = c[1] and 1 or 0
  out[n + 8] = int(c[2])
  out[n + 9] = int(c[3])
  out[n + 10] = int(c[4])
  out[n + 11] = int(c[5])
  out[n + 12] = int(c[6])
  out[n + 13] = now
  out[n + 14] = oldest_of(o, llen, nprio)
  out[n + 15] = int(c[7])
  out[n + 16] = redis.call('ZCARD', KEYS[o + 15])
  out[n + 17] = redis.call('ZCARD', KEYS[o + 17])
  out[n + 18] = redis.call('ZCARD', KEYS[o + 18])
  out[n + 19] = redis.call('ZCARD', KEYS[o + 19])
  out[n + 20] = memory_of(o)
  local ring = redis.call('ZCARD', KEYS[o + 21])
  out[n + 21] = ring > 0 and ring - (redis.call('ZSCORE', KEYS[o + 21], '') and 1 or 0) or 0
end
return out
