--- writable_when_full(hash): call first in a script that must work when Redis has reached
--- maxmemory (lease renewal). Redis refuses a script whose *first* write is a command that may
--- grow memory, but lets a script that has already written go on (scripts stay atomic); this
--- removal of a field that never exists (task ids are never empty) is that first write.
local function writable_when_full(hash)
  redis.call('HDEL', hash, '')
end
