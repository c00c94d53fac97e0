--[[ reply: pushes a finished task's outcome to a late waiter's inbox
Sent by the worker right after a finishing script returned the inbox ids of waiters that started
waiting after the enqueue (one call per inbox). If the worker dies between the two, those waiters
learn the outcome from their next recheck (watch script) instead, if the task is still stored.
KEY inbox              the waiter's inbox list
ARG payload            msgpack [id, 'c' or 'x', result or error]
Returns the inbox's length.
]]
local n = redis.call('RPUSH', K.inbox, A.payload)
redis.call('PEXPIRE', K.inbox, 600000)
return n
