--- Reading inside a msgpack object in place (lua/search.lua's conditions), no decoding, no copy:
---   mp_str(m, i)        the string at byte i of m: where its bytes start and how many (nil: not a string)
---   mp_int(m, i)        the integer at byte i (nil: not an integer)
---   mp_at(m, i, path)   where the object at ``path`` inside the object at i starts (nil: no such
---                       object): path is names separated by '\0', each a key of a map (a string
---                       key) or, in an array, a 0-based index written in digits; '' = the object
---   mp_equals(m, i, v)  is the object at i encoded as the bytes ``v`` (one canonical encoding:
---                       the caller encodes the value the way the writer did, msgpack's smallest form)
--- @include "msgfield"
local function mp_str(m, i)
  local b = string.byte(m, i)
  if not b then return nil end
  if b >= 0xa0 and b <= 0xbf then
    return i + 1, b - 0xa0
  elseif b == 0xd9 or b == 0xda or b == 0xdb then
    local w = b == 0xd9 and 1 or (b == 0xda and 2 or 4)
    local n = mp_uint(m, i + 1, w)
    return n and i + 1 + w, n
  end
  return nil
end
local function mp_int(m, i)
  local b = string.byte(m, i)
  if not b then return nil end
  if b <= 0x7f then
    return b
  elseif b >= 0xe0 then
    return b - 0x100
  elseif b >= 0xcc and b <= 0xcf then
    return mp_uint(m, i + 1, 2 ^ (b - 0xcc))
  elseif b >= 0xd0 and b <= 0xd3 then
    local w = 2 ^ (b - 0xd0)
    local v = mp_uint(m, i + 1, w)
    if v and v >= 2 ^ (8 * w - 1) then
      v = v - 2 ^ (8 * w)
    end
    return v
  end
  return nil
end
local function mp_head(m, i)  -- a container at i: its kind ('m' map, 'a' array), entries, first entry's byte
  local b = string.byte(m, i)
  if not b then return nil end
  if b >= 0x80 and b <= 0x8f then
    return 'm', b - 0x80, i + 1
  elseif b >= 0x90 and b <= 0x9f then
    return 'a', b - 0x90, i + 1
  elseif b == 0xdc or b == 0xdd or b == 0xde or b == 0xdf then
    local w = (b == 0xdc or b == 0xde) and 2 or 4
    return (b >= 0xde) and 'm' or 'a', mp_uint(m, i + 1, w) or 0, i + 1 + w
  end
  return nil
end
local function mp_child(m, i, name)  -- where entry ``name`` of the container at i starts, or nil
  local kind, n, k = mp_head(m, i)
  if kind == 'a' then
    local idx = tonumber(name)
    if not idx or idx < 0 or idx >= n or string.find(name, '^%d+$') == nil then return nil end
    for _ = 1, idx do
      k = mp_skip(m, k)
      if not k then return nil end
    end
    return k
  elseif kind == 'm' then
    for _ = 1, n do
      local s, len = mp_str(m, k)
      local v = mp_skip(m, k)
      if not v then return nil end
      if s and len == #name and string.sub(m, s, s + len - 1) == name then
        return v
      end
      k = mp_skip(m, v)
      if not k then return nil end
    end
  end
  return nil
end
local function mp_at(m, i, path)
  local from = 1
  while i and path ~= '' do
    local stop = string.find(path, '\0', from, true)
    i = mp_child(m, i, string.sub(path, from, (stop or 0) - 1))
    if not stop then break end
    from = stop + 1
  end
  return i
end
local function mp_equals(m, i, v)  -- (a msgpack encoding is prefix-free: equal bytes from i are the object)
  return i ~= nil and string.sub(m, i, i + #v - 1) == v
end
