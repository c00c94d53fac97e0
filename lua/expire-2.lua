--[[ expire: completed -> (deleted), when the retention period is over (the janitor)
KEYS[1] completed  completed zset: id -> expiry (ms)
KEYS[2] tasks      tasks hash
ARGV[1] batch      most tasks to delete
ARGV[2] now        '' = Redis time; else a simulated time in ms
Returns {deleted, next}: next = ms until the next expiry (0 = more are due now; at most a day),
-1 = none left.
]]
--- @include "now"
--- @include "wait"
local now = now_ms(ARGV[2])
local ids = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(ids) do
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local nxt = -1
if head[2] ~= nil then
  nxt = wait_ms(head[2], now)
end
return {#ids, nxt}
