--[[ extend: renew the leases a worker holds (the heartbeat)
For each (id, token) pair the lease is pushed to now + lease, if the caller still holds it.
KEYS[1] t        tasks hash
KEYS[2] lease    lease zset
ARGV[1] lease    lease duration in ms
ARGV[2] now      '' = Redis time; else a simulated time in ms
ARGV[3..] id, token, id, token, ...
Returns {now, lost_id1, lost_id2, ...}: the ids whose lease the caller no longer holds (its
handler must stop and must not write a result). Works when Redis is full (maxmemory): running
tasks keep their leases.
]]
--- @include "now"
--- @include "whenfull"
writable_when_full(KEYS[1])
local now = now_ms(ARGV[2])
local expiry = now + tonumber(ARGV[1])
local out = {now}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[1], id)
  if v and string.sub(v, 1, 9) == 'a' .. ARGV[i + 1] and redis.call('ZSCORE', KEYS[2], id) then
    redis.call('ZADD', KEYS[2], 'XX', expiry, id)
  else
    out[#out + 1] = id
  end
end
return out
