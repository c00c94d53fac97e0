--- The queue's lifecycle event stream (asynqpy:{Q}:events), capped with XADD MAXLEN ~.
--- events_cap(conf): the cap in EVENTS, from the queue's conf hash (field 'events'; absent =
--- 10000, 0 = the stream is off). emit(stream, cap, ...): XADD the field/value pairs (one event)
--- if the stream is on. emit_ids(stream, cap, ids, ...): the events of several tasks in one entry:
--- one task = an entry with 'id', more = entries of up to IDS_PER_ENTRY tasks with 'ids'
--- (space-separated; core/results/events.py expands it into one event per task), the other fields shared.
--- The cap counts events, not entries, whatever the mix of entry sizes: the conf hash's field
--- 'kept' counts the events in the stream (HINCRBY with each entry added); once it passes the cap
--- by a hundredth (at least 1), ev_trim drops the oldest entries down to the cap (never below it:
--- an entry stays whole) with an exact XTRIM, and lowers 'kept' by what they held. So the stream
--- keeps the newest cap events, at most cap/100 + IDS_PER_ENTRY more. (Before, an entry of n
--- events was added with MAXLEN ~ cap / n: a mixed stream was trimmed to cap / n entries by its
--- last batch, and kept a sixth of the cap.) The count is repaired where it can be wrong: absent
--- (a stream written before it, or emptied), it starts from XLEN; above what the stream holds (a
--- stream deleted or trimmed by hand), the trim finds the stream's end first and sets it to what
--- it found. ev_trim reads the oldest entries in pages of 4, 8, 16... (an entry of a batch holds
--- 50 events: it reads about the few it drops, not a page of 500), at most 500 entries a call: a
--- lowered cap is reached over a few writes.
--- events_cap(conf) remembers the conf it read (each script touches one queue): emit needs it; a
--- script that reads the cap itself (done.lua, dequeue.lua: one HMGET with other fields) calls
--- events_conf(conf). Without either, an entry is added with MAXLEN ~ cap (entries) instead.
--- emit_task(stream, cap, tenant, ...): emit, and the field 'tenant' when ``tenant`` (the task's
--- tenant: includes/priority msg_tenant; nil = none) is given.
--- ids_ok(id): an id that may go in an 'ids' list (no space in it).
--- msg_type(m, at): the task type of the encoded message at byte ``at`` (default 1) of ``m`` ('' =
--- none): read in place, so a stored value's type needs no copy of its message (STORED_ACTIVE_AT).
--- active_wanted(always, followed, now): whether a dequeue writes 'active' events, from the conf
--- fields 'active' ('1' = always: Inspector.set_events(active=True)) and 'followed' (ms: until
--- when a reader following the stream asked for them; core/results/events.py Reader refreshes it): by
--- default no one reads them, and they were half the stream's cost per task.
local EVENTS_CAP = 10000
local EV_CONF = false  -- the conf hash events_cap read (the stream's count 'kept' lives there)
local function events_conf(conf)  -- a script that read the cap itself (one HMGET) names its conf
  EV_CONF = conf
end
local function events_cap(conf)
  EV_CONF = conf
  local cap = tonumber(redis.call('HGET', conf, 'events'))
  if cap == nil then
    return EVENTS_CAP
  end
  return cap
end
local function ev_size(fields)  -- the events an entry holds: 1, or the ids of its 'ids' field
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'ids' then
      local _, spaces = string.gsub(fields[i + 1], ' ', ' ')
      return spaces + 1
    end
  end
  return 1
end
local function ev_oldest(stream, excess)  -- the oldest entries that hold at most ``excess`` events:
  -- (events, entries, whether the stream ended first), read a page at a time, at most 500 entries
  local budget = math.min(excess, 500)  -- (each entry holds at least one event)
  local removed, entries, from, skip, page = 0, 0, '-', 0, 4
  while entries < budget do
    local want = math.min(page, budget - entries)
    local rows = redis.call('XRANGE', stream, from, '+', 'COUNT', want + skip)
    for r = 1 + skip, #rows do
      local n = ev_size(rows[r][2])
      if removed + n > excess then
        return removed, entries, false  -- (the cap stays whole: this entry is kept)
      end
      removed, entries = removed + n, entries + 1
    end
    if #rows < want + skip then
      return removed, entries, true
    end
    from, skip, page = rows[#rows][1], 1, page * 2  -- (the next page starts at the last entry read, skipped)
  end
  return removed, entries, false
end
local function ev_trim(stream, conf, cap, kept)
  local removed, entries, ended = ev_oldest(stream, kept - cap)
  if ended then  -- the stream ended first: it held fewer than counted
    redis.call('HSET', conf, 'kept', removed)
    return
  end
  if entries > 0 then
    redis.call('XTRIM', stream, 'MAXLEN', redis.call('XLEN', stream) - entries)
    redis.call('HINCRBY', conf, 'kept', -removed)
  end
end
local function ev_added(stream, cap, n)  -- n events were just added in one entry
  local conf = EV_CONF
  if not conf then
    return
  end
  local kept = redis.call('HINCRBY', conf, 'kept', n)
  if kept == n then  -- no count yet: the stream's other entries count one event at least
    local more = redis.call('XLEN', stream) - 1
    if more > 0 then
      kept = redis.call('HINCRBY', conf, 'kept', more)
    end
  end
  if kept > cap + math.max(1, math.floor(cap / 100)) then
    ev_trim(stream, conf, cap, kept)
  end
end
local function ev_xadd(stream, cap, n, ...)
  if EV_CONF then
    redis.call('XADD', stream, '*', ...)
    ev_added(stream, cap, n)
  else  -- (a cap that came from no conf: trimmed by entries)
    redis.call('XADD', stream, 'MAXLEN', '~', cap, '*', ...)
  end
end
local function emit(stream, cap, ...)
  if cap > 0 then
    ev_xadd(stream, cap, 1, ...)
  end
end
local function emit_task(stream, cap, tenant, ...)  -- emit, with the task's tenant last when it has one
  if cap > 0 then
    if tenant then
      local f = {...}
      f[#f + 1], f[#f + 2] = 'tenant', tenant
      ev_xadd(stream, cap, 1, unpack(f))
    else
      ev_xadd(stream, cap, 1, ...)
    end
  end
end
local IDS_PER_ENTRY = 50
local function emit_ids(stream, cap, ids, event, ...)
  local n = #ids
  if cap <= 0 or n == 0 then
    return
  elseif n == 1 then
    ev_xadd(stream, cap, 1, 'e', event, 'id', ids[1], ...)
    return
  end
  for i = 1, n, IDS_PER_ENTRY do  -- (entries of at most IDS_PER_ENTRY events: one never wipes the stream)
    local j = math.min(n, i + IDS_PER_ENTRY - 1)
    ev_xadd(stream, cap, j - i + 1, 'e', event, 'ids', table.concat(ids, ' ', i, j), ...)
  end
end
local function active_wanted(always, followed, now)
  return always == '1' or (tonumber(followed) or 0) > now
end
local function ids_ok(id)
  return not string.find(id, ' ', 1, true)
end
local function msg_type(m, at)  -- (at: where the message starts in m, default 1: no copy of it)
  at = at or 1
  local b, s, _, s16 = string.byte(m, at, at + 3)  -- (the headers: one call)
  local i
  if b and b >= 0x90 and b <= 0x9f then
    i = at + 1
  elseif b == 0xdc then
    i, s = at + 3, s16
  elseif b == 0xdd then
    i = at + 5
    s = string.byte(m, i)
  else
    return ''
  end
  if s and s >= 0xa0 and s <= 0xbf then
    return string.sub(m, i + 1, i + s - 0xa0)
  elseif s == 0xd9 then
    local n = string.byte(m, i + 1)
    if n then
      return string.sub(m, i + 2, i + 1 + n)
    end
  elseif s == 0xda then
    local hi, lo = string.byte(m, i + 1, i + 2)
    if hi and lo then
      return string.sub(m, i + 3, i + 2 + hi * 256 + lo)
    end
  end
  return ''  -- not a message (written by hand): no type
end
--- emit_failure(stream, conf, recovered, msg, id, attempt, ...): a failed attempt's events: with
--- ``recovered`` (the recoverer calls: the worker's lease expired) 'lease_expired' first, then the
--- event given as field/value pairs (retry or archived).
local function emit_failure(stream, conf, recovered, msg, id, attempt, ...)
  local cap = events_cap(conf)
  if cap == 0 then
    return
  end
  if recovered then
    emit(stream, cap, 'e', 'lease_expired', 'id', id, 'type', msg_type(msg), 'attempt', attempt)
  end
  emit(stream, cap, 'id', id, 'type', msg_type(msg), 'attempt', attempt, ...)
end
