--[[ stats: read a queue's counts per state, its counters and its oldest pending task in one atomic
snapshot (read-only; O(1): LLEN/ZCARD/GET and a look at the last few pending ids)
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
ARGV[1] now        '' = Redis time; else a simulated time in ms
Returns {pending, active, scheduled, retry, archived, completed, paused (0/1),
         processed, failed, processed_today, failed_today, trimmed, now, oldest, aggregating, groups,
         targeted, waiting, blocked}:
oldest = the stored value of the oldest pending task of the default priority (the right end of the
list; the last 10 ids are looked at, skipping placeholders of removed tasks), or, when none, of the
next task of another priority; false when none.
]]
--- @include "now"
local function int(key)
  return tonumber(redis.call('GET', key) or '0')
end
local oldest = false
local tail = redis.call('LRANGE', KEYS[1], -10, -1)
for i = #tail, 1, -1 do
  if tail[i] ~= '' then
    oldest = redis.call('HGET', KEYS[12], tail[i])
    if oldest then
      break
    end
  end
end
if not oldest then
  local next_id = redis.call('ZRANGE', KEYS[16], 0, 0)[1]
  if next_id then
    oldest = redis.call('HGET', KEYS[12], next_id)
  end
end
return {
  redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[16]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), redis.call('ZCARD', KEYS[6]),
  redis.call('EXISTS', KEYS[7]), int(KEYS[8]), int(KEYS[9]), int(KEYS[10]), int(KEYS[11]),
  int(KEYS[13]), now_ms(ARGV[1]), oldest, int(KEYS[14]), redis.call('ZCARD', KEYS[15]),
  redis.call('ZCARD', KEYS[17]), redis.call('ZCARD', KEYS[18]),
  redis.call('ZCARD', KEYS[19]),
}
