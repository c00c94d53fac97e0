--[[ limit_acquire: take a place under a named limit (Limiter, used from handlers)
The limit's token bucket (rate, burst) and its holders (concurrency) are refreshed to now; a place
is given if a token and a free slot are there: the token is used and the caller holds a slot until
it releases it (ZREM) or its hold runs out (a holder that died gives it back by itself).
KEY bucket       HASH: tokens, ts (ms) of the rate's bucket
KEY held         ZSET holder id -> when its hold runs out (ms)
ARG rate         tasks per second, '' = no rate
ARG burst        the bucket's size
ARG limit        most holders at once, '' = no concurrency limit
ARG holder       the caller's id
ARG hold         ms the slot is held at most
ARG now          '' = Redis time; else a simulated time in ms
Returns {1, 0} = granted; {0, wait} = refused: try again in wait ms.
]]
--- @include "now"
local now = now_ms(A.now)
local limit = tonumber(A.limit)
if limit then
  redis.call('ZREMRANGEBYSCORE', K.held, '-inf', now)
  if redis.call('ZCARD', K.held) >= limit then
    local first = redis.call('ZRANGE', K.held, 0, 0, 'WITHSCORES')
    return {0, math.max(1, math.min(100, tonumber(first[2]) - now))}
  end
end
local rate = tonumber(A.rate)
if rate then
  local burst = tonumber(A.burst)
  local state = redis.call('HMGET', K.bucket, 'tokens', 'ts')
  local tokens = math.min(burst, (tonumber(state[1]) or burst) + math.max(0, now - (tonumber(state[2]) or now)) * rate / 1000)
  if tokens < 1 then
    redis.call('HSET', K.bucket, 'tokens', tostring(tokens), 'ts', now)
    return {0, math.max(1, math.ceil((1 - tokens) * 1000 / rate))}
  end
  redis.call('HSET', K.bucket, 'tokens', tostring(tokens - 1), 'ts', now)
  redis.call('PEXPIRE', K.bucket, math.ceil(burst * 1000 / rate) + 60000)
end
if limit then
  redis.call('ZADD', K.held, now + tonumber(A.hold), A.holder)
  redis.call('PEXPIRE', K.held, tonumber(A.hold) + 60000)
end
return {1, 0}
