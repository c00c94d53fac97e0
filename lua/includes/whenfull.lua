--- writable_when_full(key): call first in a script that must work when Redis has reached
--- maxmemory (lease renewal, the sweep, operator actions, pausing). Redis refuses a script whose
--- *first* write is a command that may grow memory, but lets a script that has already written go
--- on (scripts stay atomic). PERSIST is a write that never grows memory; on a key with no TTL (every
--- key passed here: task hashes, lists, the paused flag) it changes nothing: it is that first write.
local function writable_when_full(key)
  redis.call('PERSIST', key)
end
