--[[ unwatch_gone: one step of the janitor's sweep of the watch hash — forgets the waiters of
tasks that are gone (deleted by an operator, or lost) while someone waited: their waiters have
learned it from their rechecks, and no finishing script will ever clear the entry.
KEYS[1] t        tasks hash
KEYS[2] watch    watch hash: id -> inbox ids of late waiters
ARGV[1] cursor   HSCAN cursor ('0' starts a pass)
ARGV[2] count    HSCAN COUNT hint
Returns {next_cursor ('0' = pass done), number of entries removed}.
Works when Redis is full: its only writes are removals.
]]
local page = redis.call('HSCAN', KEYS[2], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local entries = page[2]
local removed = 0
for i = 1, #entries, 2 do
  if not redis.call('HGET', KEYS[1], entries[i]) then
    redis.call('HDEL', KEYS[2], entries[i])
    removed = removed + 1
  end
end
return {page[1], removed}
