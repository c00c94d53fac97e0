--[[ extend: renew the leases a worker holds (the heartbeat)
For each (id, token, run_of) triple the lease is pushed to now + lease, if the caller still holds
it. A run of a targeted task (includes/runs; run_of = its task's id, which the worker knows from
the run's message: an id holding '|' is not taken for a run by itself) whose worker the task no
longer allows (Inspector.set_workers) is given back instead: the run task is deleted, the worker's entry leaves the record (the task
waits for another allowed worker) and the run is reported lost, so its handler stops.
KEY tasks        tasks hash
KEY lease        lease zset
KEY runs         runs hash: targeted task id -> record
KEY progress      progress hash (a run given back loses its progress)
KEY wake         the queue's wake-up list (a run given back wakes a worker, for any-worker tasks)
ARG lease_ms      lease duration in ms
ARG now          '' = Redis time; else a simulated time in ms
ARG held... {id token run_of}  one item per task (run_of '' = not a run of a targeted task)
Returns {now, lost_id1, lost_id2, ...}: the ids whose lease the caller no longer holds (its
handler must stop and must not write a result). Works when Redis is full (maxmemory): running
tasks keep their leases.
]]
--- @include "now"
--- @include "whenfull"
--- @include "signal"
--- @include "runs"
--- @include "stored"
--- @include "exit"
writable_when_full(K.tasks)
local now = now_ms(A.now)
local expiry = now + tonumber(A.lease_ms)
local out = {now}
for i = 1, A.held.n do
  local h = A.held[i]
  local id = h.id
  local v = redis.call('HGET', K.tasks, id)
  if stored_holds(v, h.token) and redis.call('ZSCORE', K.lease, id) then
    local tid, name = h.run_of, nil
    if tid ~= '' and string.sub(id, 1, #tid + 1) == tid .. '|' then
      name = string.sub(id, #tid + 2)
    else
      tid = nil
    end
    local rec = tid and redis.call('HGET', K.runs, tid)
    local r = rec and rec_parse(rec)
    if r and r.states[name] and not rec_allows(r, name) then
      r.states[name] = nil
      redis.call('HSET', K.runs, tid, rec_build(r))
      redis.call('ZREM', K.lease, id)
      redis.call('HDEL', K.tasks, id)
      task_exit({progress = K.progress}, {id = id, how = 'run_ended'})
      signal(K.wake)
      out[#out + 1] = id
    else
      redis.call('ZADD', K.lease, 'XX', expiry, id)
    end
  else
    out[#out + 1] = id
  end
end
return out
