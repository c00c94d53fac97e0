--[[ drop: (orphaned lease) -> (deleted)
The recoverer found an expired lease whose task is not active (its data deleted or corrupted by
hand, or rewritten to another state): remove the dangling lease so it is not reported again.
KEYS[1] lease    lease zset
KEYS[2] tasks    tasks hash
ARGV[1] id
ARGV[2] now      '' = Redis time; else a simulated time in ms
Returns 1 = dropped, 0 = no such lease, -4 = refused: the lease is alive or the task is active
(an active task with an expired lease is retried or archived instead).
]]
--- @include "now"
local id = ARGV[1]
local exp = redis.call('ZSCORE', KEYS[1], id)
if not exp then
  return 0
end
local v = redis.call('HGET', KEYS[2], id)
if tonumber(exp) > now_ms(ARGV[2]) or (v and string.sub(v, 1, 1) == 'a') then
  return -4
end
redis.call('ZREM', KEYS[1], id)
return 1
