--[[ dequeue: pending -> active (with a lease)
Pops up to ARGV[1] tasks from the right of the pending list (oldest first) and leases them to the
caller until now + lease. A paused queue yields nothing. If tasks remain, one wake-up token is left
so another idle worker comes to help.
KEYS[1] t        tasks hash
KEYS[2] pending  pending list
KEYS[3] lease    lease zset: id -> lease expiry (ms, Redis clock)
KEYS[4] paused   paused flag (exists = paused)
KEYS[5] wake     wake-up list
KEYS[6] events   the queue's event stream
KEYS[7] conf     the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] count    how many tasks at most
ARGV[2] lease    lease duration in ms
ARGV[3] token    8-character lease token; the worker proves ownership with it later
ARGV[4] now      '' = Redis time; else a simulated time in ms
Returns {now, remaining, id1, msg1, id2, msg2, ...}; remaining = -1 when the queue is paused.
Ids whose data is missing, or whose task is not pending (a stray copy of an id: corruption by
hand), are dropped from the list; only pending tasks are leased, each once. The batch costs one
HMGET, one HSET and one ZADD however many tasks it takes (plus an XADD each with events on).
]]
--- @include "now"
--- @include "signal"
--- @include "events"
local now = now_ms(ARGV[4])
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {now, -1}
end
local out = {now, 0}
local ids = redis.call('RPOP', KEYS[2], tonumber(ARGV[1]))
if ids then
  local expiry = now + tonumber(ARGV[2])
  local prefix = 'a' .. ARGV[3]
  local vals = redis.call('HMGET', KEYS[1], unpack(ids))
  local hset, zadd, seen = {}, {}, {}
  for i, id in ipairs(ids) do
    local v = vals[i]
    if v and not seen[id] and string.sub(v, 1, 1) == 'p' then
      seen[id] = true
      local msg = string.sub(v, 2)
      hset[#hset + 1] = id
      hset[#hset + 1] = prefix .. msg
      zadd[#zadd + 1] = expiry
      zadd[#zadd + 1] = id
      out[#out + 1] = id
      out[#out + 1] = msg
    end
  end
  if #hset > 0 then
    redis.call('HSET', KEYS[1], unpack(hset))
    redis.call('ZADD', KEYS[3], unpack(zadd))
    local cap = events_cap(KEYS[7])
    for i = 3, #out, 2 do
      emit(KEYS[6], cap, 'e', 'active', 'id', out[i], 'type', msg_type(out[i + 1]))
    end
  end
end
local remaining = redis.call('LLEN', KEYS[2])
out[2] = remaining
if remaining > 0 then
  signal(KEYS[5])
end
return out
