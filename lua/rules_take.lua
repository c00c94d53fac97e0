--[[ rules_take: input list -> taken list, up to n events at once (the rules engine's batch)
Each event moves with RPOPLPUSH, so at every moment it is in exactly one of the two lists (Resc's
guarantee, for a batch); the caller handles them, then removes each from the taken list.
KEY input        the watcher's input list (events are LPUSHed there, taken from its tail)
KEY taken        the watcher's taken list
ARG n            the most events to move
Returns the events moved, oldest first (empty: the input list is empty).
]]
local out = {}
for _ = 1, tonumber(A.n) do
  local ev = redis.call('RPOPLPUSH', K.input, K.taken)
  if not ev then
    break
  end
  out[#out + 1] = ev
end
return out
