--[[ limit_acquire: take a place under a named limit (Limiter, used from handlers)
The limit's token bucket (rate, burst) and its holders (concurrency) are refreshed to now; a place
is given if a token and a free slot are there: the token is used and the caller holds a slot until
it releases it (ZREM) or its hold runs out (a holder that died gives it back by itself).
KEYS[1] bucket   HASH: tokens, ts (ms) of the rate's bucket
KEYS[2] held     ZSET holder id -> when its hold runs out (ms)
ARGV[1] rate     tasks per second, '' = no rate
ARGV[2] burst    the bucket's size
ARGV[3] limit    most holders at once, '' = no concurrency limit
ARGV[4] holder   the caller's id
ARGV[5] hold     ms the slot is held at most
ARGV[6] now      '' = Redis time; else a simulated time in ms
Returns {1, 0} = granted; {0, wait} = refused: try again in wait ms.
]]
--- @include "now"
local now = now_ms(ARGV[6])
local limit = tonumber(ARGV[3])
if limit then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= limit then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {0, math.max(1, math.min(100, tonumber(first[2]) - now))}
  end
end
local rate = tonumber(ARGV[1])
if rate then
  local burst = tonumber(ARGV[2])
  local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
  local tokens = math.min(burst, (tonumber(state[1]) or burst) + math.max(0, now - (tonumber(state[2]) or now)) * rate / 1000)
  if tokens < 1 then
    redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
    return {0, math.max(1, math.ceil((1 - tokens) * 1000 / rate))}
  end
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - 1), 'ts', now)
  redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 60000)
end
if limit then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[4])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[5]) + 60000)
end
return {1, 0}
