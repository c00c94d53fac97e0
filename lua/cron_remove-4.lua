--[[ cron_remove: forget a scheduler entry (an operator's, or a code entry no longer declared)
KEYS[1] cron      the queue's entry definitions (HASH name -> definition)
KEYS[2] cron_last  the queue's last fired tick per entry (HASH)
KEYS[3] cron_paused  the queue's paused entries (SET)
KEYS[4] history   the entry's enqueue history (LIST)
ARGV[1] name      the entry's name
Returns 1 = removed, 0 = no such entry (its leftovers, if any, are removed too). Tasks it already
enqueued stay.
]]
--- @include "operator"
operator_only(KEYS[1])  -- an operator's: a producer is refused here, before any write
local existed = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('DEL', KEYS[4])
return existed
