--- Durable processes (docs/processes.md; asynqpy/core/processes/model.py keeps the same layout).
--- A process's record, in its queue's proc hash (process id -> record), is a rec_pack (includes/
--- flow) of: {type, status ('starting' / 'running' / 'error'), state (msgpack, '' = none), count
--- (events appended so far), timer id (the scheduled timeout input, '' = none), timer due (ms),
--- created (ms), updated (ms), broken_by (the input that failed for good), error (its error),
--- first (the oldest event kept: a type with max_events deletes older ones; absent or '' = 1)}.
--- Its history is in the queue's hist hash, one field per event: '<process id>:<n>' -> rec_pack
--- {at (ms), input id, kind, data (msgpack)}, n = 1, 2, ... (paged with HMGET).
--- @include "flow"
--- @include "stored"
local R_TYPE, R_STATUS, R_STATE, R_N, R_TIMER, R_DUE, R_CREATED, R_UPDATED, R_BROKEN, R_ERROR, R_FIRST = 1, 2, 3, 4,
  5, 6, 7, 8, 9, 10, 11

--- proc_first(r): the oldest event a record's process keeps.
local function proc_first(r)
  return tonumber(r[R_FIRST] or '') or 1
end

--- proc_mark_error(proc, procs, pid, input, err, now, kind): an input (of ``kind``) of process
--- ``pid`` failed for good: the process is in error (broken by ``input``, with ``err``). No record:
--- nothing to do. Nor for an input the worker would have ended without running the processor
--- (core/processes/model.py decide: a second init, a stale timer, a call to a process in error, a repair
--- of one that is not, a removal): its failure (a lease that expired on its last try) says nothing
--- of the process, and must not replace the input that broke it. The process's timer, if it was
--- this input, is spent (cleared) in every case.
local function proc_mark_error(proc, procs, pid, input, err, now, kind)
  local raw = redis.call('HGET', proc, pid)
  if not raw then
    return
  end
  local r = rec_unpack(raw)
  local s, spent = r[R_STATUS], r[R_TIMER] == input
  if spent then  -- the process's timer fired and failed for good: it is spent either way
    r[R_TIMER], r[R_DUE] = '', ''
  end
  if kind == 'remove' or (kind == 'init' and s ~= 'starting') or (kind == 'call' and s == 'error')
      or (kind == 'repair' and s ~= 'error') or (kind == 'timeout' and (s == 'error' or not spent)) then
    if spent then
      redis.call('HSET', proc, pid, rec_pack(r))
    end
    return
  end
  r[R_STATUS], r[R_BROKEN], r[R_ERROR], r[R_UPDATED] = 'error', input, err, tostring(now)
  redis.call('HSET', proc, pid, rec_pack(r))
  redis.call('ZADD', procs, now, pid)
end

--- proc_cancel_timer(t, scheduled, blocked, tid, self): the pending timer input ``tid`` is
--- replaced or cancelled: deleted if it has not started (scheduled, or blocked behind its key; a
--- key list entry whose task is gone is skipped when the key is released). Not the running input.
local function proc_cancel_timer(t, scheduled, blocked, tid, self)
  if tid == '' or tid == self then
    return
  end
  local v = redis.call('HGET', t, tid)
  local st = stored_state(v)
  if st == 's' or st == 'b' then
    redis.call('HDEL', t, tid)
    redis.call('ZREM', scheduled, tid)
    redis.call('ZREM', blocked, tid)
  end
end

--- proc_drop_history(hist, pid, from, to): delete events ``from`` .. ``to`` of process ``pid``
--- (a removed process's, or those past its type's max_events).
local function proc_drop_history(hist, pid, from, to)
  local i = from
  while i <= to do
    local f = {}
    for j = i, math.min(to, i + 999) do
      f[#f + 1] = pid .. ':' .. j
    end
    redis.call('HDEL', hist, unpack(f))
    i = i + 1000
  end
end
