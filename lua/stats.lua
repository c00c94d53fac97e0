--[[ stats: read one or more queues' counts per state, counters and oldest pending task, each queue
in one atomic snapshot (read-only; O(1) per queue: LLEN/ZCARD/MGET, a look at the last few pending
ids, and when asked a sampled MEMORY USAGE of seven keys). The Inspector reads up to 50 queues per
call (on a Cluster, queues of one slot: every key of a call in one slot).
KEY @pending
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
KEY targeted       targeted tasks (zset, includes/runs)
KEY waiting        tasks waiting on parents (zset, includes/flow)
KEY blocked        tasks waiting behind their key (zset, includes/serial)
KEY conf           the queue's settings hash (the ``fields`` read from it)
KEY more... {*}    the keys of further queues, 24 per queue in the order above (groups expanded)
ARG now          '' = Redis time; else a simulated time in ms
ARG samples      0 = no memory reading; n > 0: each queue's memory, the sum of MEMORY USAGE ... SAMPLES n
                 of its tasks hash, pending list, state zsets and tenant zset (MEMORY_KEYS)
ARG fields...    the conf fields to read per queue: the queue settings' (core/spine/queue_settings.py STATS_FIELDS)
Returns 21 + #fields values per queue, in KEYS order: {pending, active, scheduled, retry, archived, completed,
paused (0/1), processed, failed, processed_today, failed_today, trimmed, now, oldest, aggregating,
groups, targeted, waiting, blocked, memory, tenants, fields...}: each field's stored value (false when
absent), decoded by the table's row; pending counts every tenant's tasks;
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
local MEMORY_KEYS = {'tasks', 'pending', 'lease', 'scheduled', 'retry', 'archived', 'completed', 'tq'}

local function oldest_of(q, llen, nprio)
  if llen > 0 then
    local tail = redis.call('LRANGE', q.pending, -10, -1)
    for i = #tail, 1, -1 do
      if tail[i] ~= '' then
        local stored = redis.call('HGET', q.tasks, tail[i])
        if stored then
          return stored
        end
      end
    end
  end
  if nprio > 0 then
    local next_id = redis.call('ZRANGE', q.prio, 0, 0)[1]
    if next_id then
      return redis.call('HGET', q.tasks, next_id)
    end
  end
  local member = redis.call('ZRANGE', q.tq, 0, 0)[1]  -- (T \0 band seq id: the id after 18 bytes)
  if member then
    local at = string.find(member, '\0', 1, true)
    return redis.call('HGET', q.tasks, string.sub(member, at + 18))
  end
  return false
end

local function memory_of(q)
  if samples <= 0 then
    return false
  end
  local total = 0
  for _, k in ipairs(MEMORY_KEYS) do
    local used = redis.pcall('MEMORY', 'USAGE', q[k], 'SAMPLES', samples)
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
for i = 0, K.more.n do
  local q = K.more[i]  -- (item 0: this call's first queue, K)
  local llen, nprio = redis.call('LLEN', q.pending), redis.call('ZCARD', q.prio)
  local c = redis.call('MGET', q.paused, q.processed, q.failed, q.processed_day, q.failed_day, q.trimmed,
                       q.aggregating)
  local n = #out
  out[n + 1] = llen + nprio + redis.call('ZCARD', q.tq)
  out[n + 2] = redis.call('ZCARD', q.lease)
  out[n + 3] = redis.call('ZCARD', q.scheduled)
  out[n + 4] = redis.call('ZCARD', q.retry)
  out[n + 5] = redis.call('ZCARD', q.archived)
  out[n + 6] = redis.call('ZCARD', q.completed)
  out[n + 7] = c[1] and 1 or 0
  out[n + 8] = int(c[2])
  out[n + 9] = int(c[3])
  out[n + 10] = int(c[4])
  out[n + 11] = int(c[5])
  out[n + 12] = int(c[6])
  out[n + 13] = now
  out[n + 14] = oldest_of(q, llen, nprio)
  out[n + 15] = int(c[7])
  out[n + 16] = redis.call('ZCARD', q.groups)
  out[n + 17] = redis.call('ZCARD', q.targeted)
  out[n + 18] = redis.call('ZCARD', q.waiting)
  out[n + 19] = redis.call('ZCARD', q.blocked)
  out[n + 20] = memory_of(q)
  local ring = redis.call('ZCARD', q.tr)
  out[n + 21] = ring > 0 and ring - (redis.call('ZSCORE', q.tr, '') and 1 or 0) or 0
  if A.fields.n > 0 then
    local got = redis.call('HMGET', q.conf, A.fields.all())
    for f = 1, A.fields.n do
      out[n + 21 + f] = got[f] or false
    end
  end
end
return out
