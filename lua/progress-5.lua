--[[ progress: (active) -> (active); a running task reports its progress
The handler called task.progress(value) (the worker rate-limits the calls). Stored as the task's
latest progress, and pushed to the inbox of the client waiting through Client.call, if any.
KEYS[1] tasks          tasks hash
KEYS[2] progress       progress hash: id -> latest value (msgpack)
KEYS[3] reply          the waiting client's inbox (the progress hash when nobody waits)
KEYS[4] events         the queue's event stream
KEYS[5] conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
ARGV[1] id
ARGV[2] token          the lease token of the run reporting
ARGV[3] value          the progress value (msgpack)
ARGV[4] payload        what to push to the inbox (msgpack [id, 'p', value]), '' = nobody waits
Returns 1 = stored, 0 = no such task, -3 = the caller no longer holds the lease (not stored).
]]
--- @include "events"
local id = ARGV[1]
local v = redis.call('HGET', KEYS[1], id)
if not v then
  return 0
end
if string.sub(v, 1, 9) ~= 'a' .. ARGV[2] then
  return -3
end
redis.call('HSET', KEYS[2], id, ARGV[3])
if ARGV[4] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[3], 600000)
end
emit(KEYS[4], events_cap(KEYS[5]), 'e', 'progress', 'id', id, 'type', msg_type(string.sub(v, 10)), 'value', ARGV[3])
return 1
