--- The queue's lifecycle event stream (asynqpy:{Q}:events), capped with XADD MAXLEN ~.
--- events_cap(conf): the cap, from the queue's conf hash (field 'events'; absent = 10000,
--- 0 = the stream is off). emit(stream, cap, ...): XADD the field/value pairs if the stream is on.
--- msg_type(m): the task type of an encoded message (its array's first element, a msgpack
--- string), read from the first bytes without decoding the rest (the payload may be large); ''
--- for bytes that are not a message (truncated or written by hand): never an error.
local EVENTS_CAP = 10000
local function events_cap(conf)
  local cap = tonumber(redis.call('HGET', conf, 'events'))
  if cap == nil then
    return EVENTS_CAP
  end
  return cap
end
local function emit(stream, cap, ...)
  if cap > 0 then
    redis.call('XADD', stream, 'MAXLEN', '~', cap, '*', ...)
  end
end
local function msg_type(m)
  local b = string.byte(m, 1)
  local i
  if b and b >= 0x90 and b <= 0x9f then
    i = 2
  elseif b == 0xdc then
    i = 4
  elseif b == 0xdd then
    i = 6
  else
    return ''
  end
  local s = string.byte(m, i)
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
