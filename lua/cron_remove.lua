--[[ cron_remove: forget a scheduler entry (an operator's, or a code entry no longer declared)
KEY cron          the queue's entry definitions (HASH name -> definition)
KEY cron_last      the queue's last fired tick per entry (HASH)
KEY cron_paused      the queue's paused entries (SET)
KEY history       the entry's enqueue history (LIST)
ARG name          the entry's name
Returns 1 = removed, 0 = no such entry (its leftovers, if any, are removed too). Tasks it already
enqueued stay.
]]
--- @include "operator"
operator_only(K.cron)  -- an operator's: a producer is refused here, before any write
local existed = redis.call('HDEL', K.cron, A.name)
redis.call('HDEL', K.cron_last, A.name)
redis.call('SREM', K.cron_paused, A.name)
redis.call('DEL', K.history)
return existed
