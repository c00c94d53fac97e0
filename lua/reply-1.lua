--[[ reply: pushes a finished task's outcome to a late waiter's inbox
Sent by the worker right after a finishing script returned the inbox ids of waiters that started
waiting after the enqueue (one call per inbox). If the worker dies between the two, those waiters
learn the outcome from their next recheck (watch script) instead, if the task is still stored.
KEYS[1] inbox          the waiter's inbox list
ARGV[1] payload        msgpack [id, 'c' or 'x', result or error]
Returns the inbox's length.
]]
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], 600000)
return n
