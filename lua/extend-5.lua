--[[ extend: renew the leases a worker holds (the heartbeat)
For each (id, token, run_of) triple the lease is pushed to now + lease, if the caller still holds
it. A run of a targeted task (includes/runs; run_of = its task's id, which the worker knows from
the run's message: an id holding '|' is not taken for a run by itself) whose worker the task no
longer allows (Inspector.set_workers) is given back instead: the run task is deleted, the worker's entry leaves the record (the task
waits for another allowed worker) and the run is reported lost, so its handler stops.
KEYS[1] tasks    tasks hash
KEYS[2] lease    lease zset
KEYS[3] runs     runs hash: targeted task id -> record
KEYS[4] progress  progress hash (a run given back loses its progress)
KEYS[5] wake     the queue's wake-up list (a run given back wakes a worker, for any-worker tasks)
ARGV[1] lease_ms  lease duration in ms
ARGV[2] now      '' = Redis time; else a simulated time in ms
ARGV[3..] held  id, token, run_of, id, token, run_of, ... (run_of '' = not a run of a targeted task)
Returns {now, lost_id1, lost_id2, ...}: the ids whose lease the caller no longer holds (its
handler must stop and must not write a result). Works when Redis is full (maxmemory): running
tasks keep their leases.
]]
--- @include "now"
--- @include "whenfull"
--- @include "signal"
--- @include "runs"
writable_when_full(KEYS[1])
local now = now_ms(ARGV[2])
local expiry = now + tonumber(ARGV[1])
local out = {now}
for i = 3, #ARGV, 3 do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[1], id)
  if v and string.sub(v, 1, 9) == 'a' .. ARGV[i + 1] and redis.call('ZSCORE', KEYS[2], id) then
    local tid, name = ARGV[i + 2], nil
    if tid ~= '' and string.sub(id, 1, #tid + 1) == tid .. '|' then
      name = string.sub(id, #tid + 2)
    else
      tid = nil
    end
    local rec = tid and redis.call('HGET', KEYS[3], tid)
    local r = rec and rec_parse(rec)
    if r and r.states[name] and not rec_allows(r, name) then
      r.states[name] = nil
      redis.call('HSET', KEYS[3], tid, rec_build(r))
      redis.call('ZREM', KEYS[2], id)
      redis.call('HDEL', KEYS[1], id)
      redis.call('HDEL', KEYS[4], id)
      signal(KEYS[5])
      out[#out + 1] = id
    else
      redis.call('ZADD', KEYS[2], 'XX', expiry, id)
    end
  else
    out[#out + 1] = id
  end
end
return out
