--[[ stats: read a queue's counts per state and its counters in one atomic snapshot (read-only)
KEYS[1] pending  KEYS[2] lease  KEYS[3] scheduled  KEYS[4] retry  KEYS[5] archived
KEYS[6] completed  KEYS[7] paused  KEYS[8] processed  KEYS[9] failed
KEYS[10] processed_day  KEYS[11] failed_day
Returns {pending, active, scheduled, retry, archived, completed, paused (0/1),
         processed, failed, processed_today, failed_today}.
]]
local function int(key)
  return tonumber(redis.call('GET', key) or '0')
end
return {
  redis.call('LLEN', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), redis.call('ZCARD', KEYS[6]),
  redis.call('EXISTS', KEYS[7]), int(KEYS[8]), int(KEYS[9]), int(KEYS[10]), int(KEYS[11]),
}
