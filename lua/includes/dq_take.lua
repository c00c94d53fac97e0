--- The dequeue's take (lua/dequeue.lua; docs/internals-scripts.md "The dequeue, in stages"): what the
--- gate and the limits let through (s.count), taken in this order:
--- 1. first runs of targeted tasks the caller (worker A.name) may take (includes/runs:
---    those naming it, then those any worker may run; a task it runs, has succeeded or failed on,
---    or whose runs are all taken, is passed over; one whose run on it expired may be taken
---    again; one whose run id still has a lease, held by the run of a task deleted since under the
---    same id, waits for that run's end: one run id, one lease, one slot). A run's id is
---    '<task id>|<name>', its message the task's; each uses one of s.count.
---    A targeted task of a blocked type gives no run (it stays targeted; min_worker_version is
---    refused for targeted tasks). Runs left for other workers wake one.
--- 2. take-backs: a caller with a version takes back to the front of the pending tasks up to
---    s.count tasks held for versions up to its own (includes/hold: VERSION_BAND + v).
--- 3. the pending tasks: in turns across the tenants while any has pending tasks (the ring tr or
---    tw exists: includes/dq_fair), else the plain take (includes/dq_plain); s.ids (false: none).
--- The plain take's ids are not yet checked: the lease stage reads them and holds or drops those
--- it must; a tenant's were checked by its turn (s.vals: the value read, s.checked: its message).
--- @include "dq_fair"
do
  if s.count > 0 and A.name ~= '' and redis.call('EXISTS', K.runs) == 1 then  -- (no targeted task: no scan)
    local name, seen, open = A.name, {}, false
    for _, index in ipairs({K.mine, K.targeted_any}) do
      for _, tid in ipairs(s.count > 0 and redis.call('ZRANGE', index, 0, RUN_SCAN - 1) or {}) do
        if s.count > 0 and not seen[tid] then
          seen[tid] = true
          local v = redis.call('HGET', K.tasks, tid)
          local rec = redis.call('HGET', K.runs, tid)
          if not v or stored_state(v) ~= 'm' or not rec then
            redis.call('ZREM', index, tid)  -- the task is gone (deleted by hand): a stale entry
          else
            local r = rec_parse(rec)
            local mine = r.states[name]
            if (not mine or mine[1] == 'e') and rec_allows(r, name) and rec_count(r, 'r') + rec_count(r, 's') < r.n
                and not type_held(s.holds, v)  -- (a blocked type's runs wait in place: includes/hold)
                and not redis.call('ZSCORE', K.lease, tid .. '|' .. name) then  -- (the run of a task deleted since,
              -- under the same id, still holds this run id's lease: taken once it ended or its lease expired)
              if not mine then  -- (taken again after its lease expired: its entry is reused, not doubled)
                r.order[#r.order + 1] = name
              end
              r.states[name] = {'r', tostring(now)}
              redis.call('HSET', K.runs, tid, rec_build(r))
              s.runs[#s.runs + 1] = tid .. '|' .. name
              s.runs[#s.runs + 1] = stored_msg(v)
              s.count = s.count - 1
              open = open or (r.allowed == '*' and rec_count(r, 'r') + rec_count(r, 's') < r.n)
            end
          end
        end
      end
    end
    if open then  -- runs are left for other workers: wake one (it takes one and wakes the next)
      signal(K.wake)
    end
  end
  if s.version > 0 and s.count > 0 then  -- tasks held for a version up to the caller's: back to the front
    local pk = G.pending
    local back = redis.call('ZRANGE', K.scheduled, string.format('%.0f', VERSION_BAND),
      string.format('%.0f', VERSION_BAND + s.version), 'BYSCORE', 'LIMIT', 0, s.count)  -- (16 digits: '%.0f')
    for j = #back, 1, -1 do  -- (each to the front: the last first, so they keep their order)
      local id = back[j]
      local v = redis.call('HGET', K.tasks, id)
      redis.call('ZREM', K.scheduled, id)
      if stored_state(v) == 's' then
        redis.call('HSET', K.tasks, id, 'p' .. stored_msg(v))
        push_pending(pk, id, v, 2, true)
      end
    end
  end
  s.prios = redis.call('ZCARD', K.prio)  -- (none, the usual case: the zset is not read)
  if s.count > 0 then
    s.fair = redis.call('EXISTS', K.tr, K.tw) > 0  -- tenants have pending tasks (taking turns or held by their rate)
    local ids = s.fair and take_fair(s, s.count) or take_plain(s, s.count)
    s.ids = #ids > 0 and ids
  end
end
