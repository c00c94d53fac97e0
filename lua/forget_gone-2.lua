--[[ forget_gone: one step of the janitor's sweep of a per-task hash — forgets the entries of
tasks that are gone, which no finishing script will clear:
  mode 'watch'    the watch hash: waiters of tasks deleted (or lost) while someone waited (their
                  waiters learned it from their rechecks);
  mode 'children' the children hash (includes/flow): registrations of parents expired or trimmed
                  since they ended (their children were told then);
  mode 'deps'     the deps hash (includes/flow): records of children expired or trimmed, and
                  records of ends delivered before a child that never came was stored (a producer
                  died between registering it and storing it) once they are 10 minutes old.
KEYS[1] tasks    tasks hash
KEYS[2] hash     the hash swept
ARGV[1] cursor   HSCAN cursor ('0' starts a pass)
ARGV[2] count    HSCAN COUNT hint
ARGV[3] mode     'watch', 'children' or 'deps'
ARGV[4] now      '' = Redis time; else a simulated time in ms
Returns {next_cursor ('0' = pass done), number of entries removed}.
Works when Redis is full: its only writes are removals.
]]
--- @include "now"
--- @include "flow"
local EARLY_TTL_MS = 600000
local page = redis.call('HSCAN', KEYS[2], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local entries = page[2]
local removed = 0
local now = ARGV[3] == 'deps' and now_ms(ARGV[4]) or 0
for i = 1, #entries, 2 do
  if redis.call('HEXISTS', KEYS[1], entries[i]) == 0 then
    local gone = true
    if ARGV[3] == 'deps' then
      local r = rec_unpack(entries[i + 1])
      gone = r[1] ~= '' or (tonumber(r[3]) or 0) < now - EARLY_TTL_MS
    end
    if gone then
      redis.call('HDEL', KEYS[2], entries[i])
      removed = removed + 1
    end
  end
end
return {page[1], removed}
