--[[ cron_pause: pause or resume a scheduler entry. No tick fires while it is paused, and ticks
that fell in the pause never fire: resuming records now as the entry's last fired tick (the
missed policy is for downtime, not for a pause).
KEY cron          the queue's entry definitions (HASH name -> definition)
KEY cron_paused      the queue's paused entries (SET)
KEY cron_last      the queue's last fired tick per entry (HASH name -> ms)
ARG name          the entry's name
ARG pause         '1' = pause, '0' = resume
ARG now           '' = Redis time; else a simulated time in ms
Returns 1 = done, 0 = no such entry (nothing written).
]]
--- @include "now"
--- @include "whenfull"
writable_when_full(K.cron)  -- pausing stops an inflow: it must work on a full Redis too
if redis.call('HEXISTS', K.cron, A.name) == 0 then
  return 0
end
if A.pause == '1' then
  redis.call('SADD', K.cron_paused, A.name)
elseif redis.call('SREM', K.cron_paused, A.name) == 1 then
  local now = now_ms(A.now)
  if tonumber(redis.call('HGET', K.cron_last, A.name) or '0') < now then
    redis.call('HSET', K.cron_last, A.name, now)
  end
end
return 1
