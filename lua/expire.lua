--[[ expire: completed -> (deleted), when the retention period is over (the janitor)
KEY completed      completed zset: id -> expiry (ms)
KEY tasks          tasks hash
ARG batch          most tasks to delete
ARG now            '' = Redis time; else a simulated time in ms
Returns {deleted, next}: next = ms until the next expiry (0 = more are due now; at most a day),
-1 = none left.
]]
--- @include "now"
--- @include "wait"
local now = now_ms(A.now)
local ids = redis.call('ZRANGE', K.completed, '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(A.batch))
for _, id in ipairs(ids) do
  redis.call('HDEL', K.tasks, id)
  redis.call('ZREM', K.completed, id)
end
local head = redis.call('ZRANGE', K.completed, 0, 0, 'WITHSCORES')
local nxt = -1
if head[2] ~= nil then
  nxt = wait_ms(head[2], now)
end
return {#ids, nxt}
