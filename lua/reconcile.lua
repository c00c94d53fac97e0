--[[ reconcile: one step of the consistency sweep (the janitor) — a task whose hash entry is not
in the container its state names is put back there, so nothing stays stuck after keys were
removed or corrupted by hand:
  'a' without a lease      -> lease expiring now (the recoverer retries or archives it)
  's' / 'r' not in its zset -> due now (the forwarder makes it pending)
  'x' / 'c' not in its zset -> archived now / expiring now
  'm' not in the targeted zset -> put back (a worker finds it again through its index zsets)
  'w' not in the waiting zset -> put back (a parent's end still releases it: includes/flow)
  'b' not in the blocked zset -> put back (its key's list still releases it: includes/serial)
  'a' of a tenant, not in ta -> its entry restored (its tenant's count is left as it is: an entry
                              removed by hand leaves the count counting it; lua/tenant_fix.lua
                              corrects a count that holds a tenant back)
  any other first byte     -> archived as is (state 'x' + the bytes found), for inspection
A pending task missing from the pending list cannot be found in O(1) (list membership is O(n))
and is not checked; nor is an aggregating task ('g': its group's zset is named in its message,
which a script cannot turn into a key it was not given). Cost: one HSCAN step of ~``count`` entries.
KEY tasks          tasks hash
KEY lease          lease zset
KEY scheduled      scheduled zset
KEY retry          retry zset
KEY archived       archived zset
KEY completed      completed zset
KEY targeted       targeted tasks zset (includes/runs)
KEY waiting        waiting zset (includes/flow)
KEY blocked        blocked zset (includes/serial)
KEY ta             the queue's active tenant tasks: hash id -> tenant (includes/priority)
ARG cursor         HSCAN cursor ('0' starts a sweep)
ARG count          HSCAN COUNT hint
ARG now            '' = Redis time; else a simulated time in ms
Returns {next_cursor ('0' = sweep done), id1, what1, id2, what2, ...} for each entry repaired.
Works when Redis is full (maxmemory): it starts with a no-op removal (includes/whenfull).
]]
--- @include "now"
--- @include "whenfull"
--- @include "stored"
--- @include "priority"
writable_when_full(K.tasks)
local now = nil  -- read when a first repair needs it (most steps repair nothing: no TIME call)
local zsets = {a = K.lease, s = K.scheduled, r = K.retry, x = K.archived, c = K.completed, m = K.targeted, w = K.waiting, b = K.blocked}
local page = redis.call('HSCAN', K.tasks, A.cursor, 'COUNT', tonumber(A.count))
local out = {page[1]}
local entries = page[2]
for i = 1, #entries, 2 do
  local id, v = entries[i], entries[i + 1]
  local st = stored_state(v)
  if st ~= 'p' and st ~= 'g' then
    local zset = zsets[st]
    if zset == nil then
      now = now or now_ms(A.now)
      redis.call('HSET', K.tasks, id, 'x' .. v)
      redis.call('ZADD', K.archived, now, id)
      out[#out + 1] = id
      out[#out + 1] = 'unknown state, archived'
    elseif st == 'a' and redis.call('HEXISTS', K.ta, id) == 0 then
      local tenant = msg_tenant(v, STORED_ACTIVE_AT)
      if tenant then
        redis.call('HSET', K.ta, id, tenant)
        out[#out + 1] = id
        out[#out + 1] = 'active task of tenant ' .. tenant .. ' not counted: entry restored'
      end
    end
    if zset ~= nil and not redis.call('ZSCORE', zset, id) then
      now = now or now_ms(A.now)
      redis.call('ZADD', zset, now, id)
      out[#out + 1] = id
      out[#out + 1] = 'state ' .. st .. ' but not in its set, put back'
    end
  end
end
return out
