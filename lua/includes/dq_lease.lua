--- The dequeue's lease (lua/dequeue.lua; docs/internals-scripts.md "The dequeue, in stages"): the runs
--- and the pending ids the take stage took become active, leased to the caller until now +
--- A.lease_ms under its token (A.token: the worker proves ownership with it later), and go into
--- the reply (s.out: id, message pairs; a run's id is '<task id>|<name>').
--- Ids whose data is missing, or whose task is not pending (a stray copy of an id: corruption by
--- hand), are dropped; only pending tasks are leased, each once. A pending task without a tenant
--- that the gate holds (includes/hold hold_score: a blocked type in conf 'holds', or a task that
--- needs a newer worker than the caller) is not leased but held in the scheduled zset (state 's');
--- it used one of s.count (a tenant's was held by its turn, before it counted: includes/dq_give,
--- which leaves each tenant task it found pending and not held in s.checked: id -> its message,
--- taken here as is, not cut and checked twice).
--- The batch costs one HMGET (the values the fair take did not read), one HSET and one ZADD however
--- many tasks it takes (plus, when 'active' events are wanted, one XADD per task type taken); an id
--- popped twice is found by ZADD's count of new members (leased once); then the 'active' events,
--- one entry per task type (includes/events), when wanted.
do
  local runs, out = s.runs, s.out
  if s.ids or #runs > 0 then
    local expiry = string.format('%.0f', now + tonumber(A.lease_ms))  -- (a string once: not one number per task)
    local prefix = 'a' .. A.token
    local hset, zadd, h, o = {}, {}, 0, 3  -- (h, o: the lengths of hset/zadd and out)
    for i = 1, #runs, 2 do
      hset[h + 1], hset[h + 2] = runs[i], prefix .. runs[i + 1]
      zadd[h + 1], zadd[h + 2] = expiry, runs[i]
      out[o + 1], out[o + 2] = runs[i], runs[i + 1]
      h, o = h + 2, o + 2
    end
    local ids = s.ids or {}
    local vals, need, fair_vals = {}, {}, s.vals  -- (the values the fair take did not read: one HMGET)
    for i = 1, #ids do
      vals[i] = fair_vals[ids[i]]
      if not vals[i] then
        need[#need + 1] = ids[i]
      end
    end
    if #need > 0 then
      local got, j = redis.call('HMGET', K.tasks, unpack(need)), 0
      for i = 1, #ids do
        if not fair_vals[ids[i]] then
          j = j + 1
          vals[i] = got[j]
        end
      end
    end
    local checked = s.checked  -- (a tenant's task: found pending and not held by its turn, includes/dq_give)
    for i = 1, #ids do
      local msg = checked[ids[i]]
      if not msg then
        msg = stored_msg_if(vals[i], 'p')  -- (only pending tasks are leased)
        local score = msg and hold_score(s.holds, vals[i], s.version, K.conf)
        if score then  -- not for this worker: held (includes/hold)
          redis.call('HSET', K.tasks, ids[i], 's' .. msg)
          redis.call('ZADD', K.scheduled, string.format('%.0f', score), ids[i])
          s.held_any = true  -- (tasks without a tenant: a tenant's were held in take_fair, before they took a slot)
          msg = nil
        end
      end
      if msg then
        local id = ids[i]
        hset[h + 1], hset[h + 2] = id, prefix .. msg
        zadd[h + 1], zadd[h + 2] = expiry, id
        out[o + 1], out[o + 2] = id, msg
        h, o = h + 2, o + 2
      end
    end
    if h > 0 then
      redis.call('HSET', K.tasks, unpack(hset))
      if redis.call('ZADD', K.lease, unpack(zadd)) < h / 2 then  -- (an id popped twice: leased once)
        local seen, kept = {}, {now, 0, 0}
        for i = 4, o, 2 do
          if not seen[out[i]] then
            seen[out[i]] = true
            local k = #kept
            kept[k + 1], kept[k + 2] = out[i], out[i + 1]
          end
        end
        out = kept
        s.out = kept
      end
      local cap = tonumber(s.cap) or EVENTS_CAP
      events_conf(K.conf)  -- (the stream's count of events: includes/events)
      if cap > 0 and active_wanted(s.active_f, s.followed, now) then  -- (one entry per type: includes/events)
        local groups, order = {}, {}
        for i = 4, #out, 2 do
          local mtype, id = msg_type(out[i + 1]), out[i]
          if ids_ok(id) then
            local g = groups[mtype]
            if not g then
              g = {}
              groups[mtype] = g
              order[#order + 1] = mtype
            end
            g[#g + 1] = id
          else
            emit(K.events, cap, 'e', 'active', 'id', id, 'type', mtype)
          end
        end
        for _, mtype in ipairs(order) do
          emit_ids(K.events, cap, groups[mtype], 'active', 'type', mtype)
        end
      end
    end
  end
end
