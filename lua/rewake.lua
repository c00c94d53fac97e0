--[[ rewake: hand back a wake-up token a worker took but will not act on
An idle worker blocks on the wake lists of all its queues at once and takes the token of whichever
queue fires first; if it then fills its free slots from another queue (or stops), the token's
queue would wait, unseen, for another worker's idle timeout. It calls this to put the token back:
one is left if the queue has pending tasks (at most one token waits, as always).
KEY @pending
KEY wake         wake-up list idle workers block on
Returns 1 = a token is waiting now, 0 = the queue has no pending task (nothing to wake for).
Works when Redis is full (includes/whenfull): a worker that drains queues hands tokens back then too.
]]
--- @include "signal"
--- @include "whenfull"
--- @include "priority"
writable_when_full(K.wake)
if pending_count(G.pending) == 0 then
  return 0
end
signal(K.wake)
return 1
