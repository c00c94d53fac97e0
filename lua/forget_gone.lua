--[[ forget_gone: one step of the janitor's sweep of a per-task hash — forgets the entries of
tasks that are gone, which no finishing script will clear:
  mode 'watch'    the watch hash: waiters of tasks deleted (or lost) while someone waited (their
                  waiters learned it from their rechecks);
  mode 'children' the children hash (includes/flow): registrations of parents expired or trimmed
                  since they ended (their children were told then);
  mode 'deps'     the deps hash (includes/flow): records of children expired or trimmed, and
                  records of ends delivered before a child that never came was stored (a producer
                  died between registering it and storing it) once they are 10 minutes old (a
                  record's edge and order fields go with its header, or, left by an early record,
                  once the header is gone).
KEY tasks        tasks hash
KEY hash         the hash swept
ARG cursor       HSCAN cursor ('0' starts a pass)
ARG count        HSCAN COUNT hint
ARG mode         'watch', 'children' or 'deps'
ARG now          '' = Redis time; else a simulated time in ms
Returns {next_cursor ('0' = pass done), number of entries removed}.
Works when Redis is full: its only writes are removals.
]]
--- @include "now"
--- @include "flow"
local EARLY_TTL_MS = 600000
local page = redis.call('HSCAN', K.hash, A.cursor, 'COUNT', tonumber(A.count))
local entries = page[2]
local removed = 0
local now = A.mode == 'deps' and now_ms(A.now) or 0
for i = 1, #entries, 2 do
  local field, child, kind = entries[i], entries[i], 'h'
  if A.mode == 'deps' then
    kind, child = rec_child(field)
  end
  if redis.call('HEXISTS', K.tasks, child) == 0 then
    local gone = true
    if kind == 'h' and A.mode == 'deps' then
      local r = rec_unpack(entries[i + 1])
      gone = r[1] ~= '' or (tonumber(r[3]) or 0) < now - EARLY_TTL_MS
      if gone then
        rec_forget(K.hash, child)
      end
    elseif kind ~= 'h' then  -- a stored child's edges go with its header; these once it is gone
      gone = redis.call('HEXISTS', K.hash, rec_field(child)) == 0
      if gone then
        redis.call('HDEL', K.hash, field)
      end
    else
      redis.call('HDEL', K.hash, field)
    end
    if gone then
      removed = removed + 1
    end
  end
end
return {page[1], removed}
