--[[ cron_pause: pause or resume a scheduler entry. No tick fires while it is paused, and ticks
that fell in the pause never fire: resuming records now as the entry's last fired tick (the
missed policy is for downtime, not for a pause).
KEYS[1] cron      the queue's entry definitions (HASH name -> definition)
KEYS[2] cron_paused  the queue's paused entries (SET)
KEYS[3] cron_last  the queue's last fired tick per entry (HASH name -> ms)
ARGV[1] name      the entry's name
ARGV[2] pause     '1' = pause, '0' = resume
ARGV[3] now       '' = Redis time; else a simulated time in ms
Returns 1 = done, 0 = no such entry (nothing written).
]]
--- @include "now"
--- @include "whenfull"
writable_when_full(KEYS[1])  -- pausing stops an inflow: it must work on a full Redis too
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[2] == '1' then
  redis.call('SADD', KEYS[2], ARGV[1])
elseif redis.call('SREM', KEYS[2], ARGV[1]) == 1 then
  local now = now_ms(ARGV[3])
  if tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0') < now then
    redis.call('HSET', KEYS[3], ARGV[1], now)
  end
end
return 1
