--[[ expired: list active tasks whose lease has expired (read-only; the recoverer then retries or
archives each one with retry/archive in recoverer mode, which re-checks the expiry atomically)
KEY lease        lease zset
KEY tasks        tasks hash
KEY outbox       the queue's outbox stream (includes/flow): ends of parents not yet delivered
ARG limit        most tasks to return
ARG now          '' = Redis time; else a simulated time in ms
Returns {now, next, outbox, id1, value1, ...}: next = ms until the next lease expires (at most a
day; -1 = no leases); outbox = entries in the outbox (the recoverer then runs the propagator);
value is the stored value ('a' .. token .. message), false when the task's data is missing.
]]
--- @include "now"
--- @include "wait"
local now = now_ms(A.now)
local ids = redis.call('ZRANGE', K.lease, '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(A.limit))
local out = {now, -1, redis.call('XLEN', K.outbox)}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', K.tasks, id)
end
local head = redis.call('ZRANGE', K.lease, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
if head[2] ~= nil then
  out[2] = wait_ms(head[2], now)
end
return out
