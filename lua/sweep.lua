--[[ sweep: the lease and the cursors of a queue's consistency sweep (the janitor), kept in the
queue's slot and shared by every worker serving the queue, so that one sweep runs per queue per
interval whatever the number of workers, and a sweep left by a worker that died is continued from
its last step by another once the lease has expired.
  claim  (``mode`` 'claim'): the lease is another's and alive -> {0, ms until it ends}; no sweep
         under way and none recorded -> the queue's first sight is recorded ('last' = now: the
         first sweep is due an interval later, not at a worker's start) -> {0, interval}; no
         sweep under way and the last ended less than an interval ago -> {0, ms until due};
         else (due, or under way with no live holder) the caller takes the lease, a due sweep
         starts with every part at cursor '0' -> {1, lease, part1, cursor1, ...}
  save   (``mode`` 'save'): the caller's steps are done (it saves about once a second, and when
         its sweep ends) and ``parts`` names the parts left with their next cursors. The lease is no longer the caller's -> {0, ms until it ends};
         parts left -> stored, lease renewed -> {1, lease}; none left -> the sweep ends ('last'
         = now, lease released) -> {2, interval}
The hash expires 3 intervals (plus a lease) after the last call: a queue nobody serves leaves
nothing behind. Cost: O(number of parts).
KEY sweep         sweep hash: 'last' (ms: the last sweep's end, or the queue's first sight),
                  'owner' and 'until' (the lease: holder's token, expiry ms), 'c:<part>' (the
                  HSCAN cursor of each part of the sweep under way not done yet)
ARG owner         the calling janitor's token
ARG lease         lease length, ms
ARG interval      ms between the end of a sweep and the next (the caller's reconcile_interval)
ARG now           '' = Redis time; else a simulated time in ms
ARG mode          'claim' or 'save'
ARG parts...      claim: the parts of a sweep (names); save: part, cursor, part, cursor, ...
Returns {code, ms, part1, cursor1, ...} as above.
Works when Redis is full (maxmemory): it starts with a no-op write (includes/whenfull).
]]
--- @include "now"
--- @include "whenfull"
writable_when_full(K.sweep)
local now = now_ms(A.now)
local lease, interval = tonumber(A.lease), tonumber(A.interval)
local flat = redis.call('HGETALL', K.sweep)
local f, parts = {}, {}
for i = 1, #flat, 2 do
  f[flat[i]] = flat[i + 1]
  if string.match(flat[i], '^c:') then
    parts[#parts + 1] = flat[i]
  end
end
local till = tonumber(f['until'] or '0') or 0
local function keep(reply)
  redis.call('PEXPIRE', K.sweep, 3 * interval + lease)
  return reply
end
if f.owner ~= A.owner and f.owner ~= nil and till > now then
  return keep({0, till - now})  -- another holds the lease
end
if A.mode == 'save' then
  if f.owner ~= A.owner then
    return keep({0, 0})  -- the lease expired and the record went (or was reset): ask again
  end
  if #parts > 0 then
    redis.call('HDEL', K.sweep, unpack(parts))
  end
  if A.parts.n == 0 then
    redis.call('HDEL', K.sweep, 'owner', 'until')
    redis.call('HSET', K.sweep, 'last', now)
    return keep({2, interval})
  end
  local fields = {'owner', A.owner, 'until', now + lease}
  for i = 1, A.parts.n, 2 do  -- (part, cursor pairs)
    fields[#fields + 1] = 'c:' .. A.parts[i]
    fields[#fields + 1] = A.parts[i + 1]
  end
  redis.call('HSET', K.sweep, unpack(fields))
  return keep({1, lease})
end
local out = {1, lease}
if #parts == 0 then
  local last = tonumber(f.last or '')
  if last == nil then
    redis.call('HSET', K.sweep, 'last', now)
    return keep({0, interval})
  end
  if now < last + interval then
    return keep({0, last + interval - now})
  end
  for i = 1, A.parts.n do
    redis.call('HSET', K.sweep, 'c:' .. A.parts[i], '0')
    out[#out + 1] = A.parts[i]
    out[#out + 1] = '0'
  end
else
  for _, k in ipairs(parts) do
    out[#out + 1] = string.match(k, '^c:(.*)$')
    out[#out + 1] = f[k]
  end
end
redis.call('HSET', K.sweep, 'owner', A.owner, 'until', now + lease)
return keep(out)
