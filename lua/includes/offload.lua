--- Offloaded payloads (docs/offload.md): a payload over the blob store's threshold is stored as a blob
--- and the message carries a reference in its place, a msgpack extension value of type 70 whose data is
--- the blob's name (asynqpy/core/offload/refs.py). Redis cannot reach the store: a task that leaves for
--- good records its blob's name in the queue's blobs SET (x.blobs) and a worker loop deletes the blob,
--- then the name (asynqpy/worker/offload.py; idempotent, and the orphan sweep removes what is missed).
---   msg_blob(m, at)      the blob name of the payload of the message starting at byte ``at`` of m
---                        (default 1: no copy), or nil when its payload is not a reference
---   exit_blob(x, m, at)  the exit duty (includes/exit task_exit, and done's tasks read in place):
---                        the name recorded in x.blobs, if any
local EXT_FIXED = {1, 2, 4, 8, 16}  -- (fixext 1 .. fixext 16: 0xd4 .. 0xd8)
local function msg_blob(m, at)
  at = at or 1
  local b, s, _, s16 = string.byte(m, at, at + 3)  -- (the headers: one call)
  local i
  if b and b >= 0x91 and b <= 0x9f then
    i = at + 1
  elseif b == 0xdc then
    i, s = at + 3, s16
  elseif b == 0xdd then
    i = at + 5
    s = string.byte(m, i)
  else
    return nil
  end
  -- s: the type, a string, skipped
  if s and s >= 0xa0 and s <= 0xbf then
    i = i + 1 + s - 0xa0
  elseif s == 0xd9 then
    i = i + 2 + (string.byte(m, i + 1) or 0)
  elseif s == 0xda then
    local hi, lo = string.byte(m, i + 1, i + 2)
    i = i + 3 + (hi or 0) * 256 + (lo or 0)
  else
    return nil
  end
  local e = string.byte(m, i)  -- the payload: a reference is an ext value of type 70
  local n, t
  if e == 0xc7 then
    n, t = string.byte(m, i + 1) or 0, i + 2
  elseif e == 0xc8 then
    local hi, lo = string.byte(m, i + 1, i + 2)
    n, t = (hi or 0) * 256 + (lo or 0), i + 3
  elseif e and e >= 0xd4 and e <= 0xd8 then
    n, t = EXT_FIXED[e - 0xd3], i + 1
  else
    return nil
  end
  if string.byte(m, t) ~= 70 or n == 0 then  -- (a message cut short, written by hand: nothing read)
    return nil
  end
  return string.sub(m, t + 1, t + n)
end
local function exit_blob(x, m, at)
  local name = m and msg_blob(m, at)
  if name then
    redis.call('SADD', x.blobs, name)
  end
end
