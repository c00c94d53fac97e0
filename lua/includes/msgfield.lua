--- Message fields read in place (the msgpack array core/model/codec.py encodes; field numbers from the
--- loader's table F, core/model/codec.py FIELD_INDEX), without decoding the message.
--- msg_field(m, i, index): where field ``index`` of the message starting at byte i of m starts.
--- msg_short(m, i, index): the message at i stops before field ``index`` (its array's header alone,
--- one call: a short array's or an array16's; an array32 is never called short).
--- msg_priority(m, i): the priority of the message starting at byte i of m. Only a message whose
--- array reaches the priority field (PRIORITY_INDEX, codec.PRIORITY_INDEX: trailing defaults
--- are left out of the encoding) is read past its first bytes, skipping the fields before it
--- (mp_skip: msgpack objects, nesting counted, not recursed); anything unreadable is the default.
--- msg_retry_front(m, i): whether the message asks its retries to go to the front.
--- msg_tenant(m, i): the tenant of the message at i, or nil (none: the tenant '').
--- msg_key(m, i): the key of the message at i (enqueue(key=...)), or nil (none, '', or not a string).
--- msg_tail(m, i): where priority, key, retry_front and tenant start (nil: not encoded), in one
--- walk; priority_at, key_at, retry_front_at, tenant_at(m, at) read each at its place;
--- msg_priority_tenant(m, i): the priority and the tenant (nil: none), in that one walk.
local PRIORITY_INDEX, DEFAULT_PRIORITY = F.priority, 5  -- (F: the loader's field table, core/model/codec.py)
-- msgpack type bytes 0xc0..0xdb, one byte each (at b - 0xbf) of a string: a constant, not tables
-- built again on every call of every script that includes this (~17 000 instructions a call).
-- FIXED: the object's size in bytes (0 = not of fixed size); a sized object (str, bin, ext): HEAD
-- its header's bytes, LENB how many of them give its length (0 = not sized)
local FIXED = '\1\0\1\1\0\0\0\0\0\0\5\9\2\3\5\9\2\3\5\9\3\4\6\10\18\0\0\0'
local HEAD = '\0\0\0\0\2\3\5\3\4\6\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\2\3\5'
local LENB = '\0\0\0\0\1\2\4\1\2\4\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1\2\4'
local function mp_uint(m, i, n)
  local v = 0
  for k = i, i + n - 1 do
    local b = string.byte(m, k)
    if not b then return nil end
    v = v * 256 + b
  end
  return v
end
local function mp_skip(m, i)  -- the index after the object starting at i (nil: not msgpack)
  local todo = 1
  while todo > 0 do
    todo = todo - 1
    local b = string.byte(m, i)
    if not b then return nil end
    if b <= 0x7f or b >= 0xe0 then
      i = i + 1
    elseif b <= 0x8f then
      i, todo = i + 1, todo + 2 * (b - 0x80)
    elseif b <= 0x9f then
      i, todo = i + 1, todo + (b - 0x90)
    elseif b <= 0xbf then
      i = i + 1 + (b - 0xa0)
    elseif b <= 0xdb and string.byte(FIXED, b - 0xbf) > 0 then
      i = i + string.byte(FIXED, b - 0xbf)
    elseif b <= 0xdb and string.byte(LENB, b - 0xbf) > 0 then
      local n = mp_uint(m, i + 1, string.byte(LENB, b - 0xbf))
      if not n then return nil end
      i = i + string.byte(HEAD, b - 0xbf) + n
    elseif b == 0xdc or b == 0xde then
      local n = mp_uint(m, i + 1, 2)
      if not n then return nil end
      i, todo = i + 3, todo + n * (b == 0xde and 2 or 1)
    elseif b == 0xdd or b == 0xdf then
      local n = mp_uint(m, i + 1, 4)
      if not n then return nil end
      i, todo = i + 5, todo + n * (b == 0xdf and 2 or 1)
    else
      return nil  -- 0xc1: never used
    end
  end
  return i
end
-- one-byte msgpack objects (positive and negative fixints, nil, false, true, the empty string): a
-- message's fields are mostly these, and one string.find skips a run of them (a byte a field)
local ONE_BYTE = '^[%z\1-\127\160\192\194\195\224-\255]*'
local function fields_skip(m, i, left)  -- where the field ``left`` fields on from the one at i starts, or nil
  while left > 0 do
    local _, e = string.find(m, ONE_BYTE, i)
    local run = e - i + 1
    if run >= left then
      return i + left
    end
    i, left = e + 1, left - run
    local b = string.byte(m, i)
    if b and b >= 0xa1 and b <= 0xbf then  -- a short string
      i = i + 1 + (b - 0xa0)
    else
      i = mp_skip(m, i)
      if not i then return nil end
    end
    left = left - 1
  end
  return i
end
local function msg_len(m, i)  -- the message's field count and where its first field starts
  local b = string.byte(m, i)
  if b and b >= 0x90 and b <= 0x9f then
    return b - 0x90, i + 1
  elseif b == 0xdc then
    return mp_uint(m, i + 1, 2) or 0, i + 3
  end
  return 0, i
end
local function msg_short(m, i, index)  -- the message at i stops before field ``index`` (one call, no walk)
  local b, hi, lo = string.byte(m, i, i + 2)
  if b and b >= 0x90 and b <= 0x9f then
    return b - 0x90 <= index
  end
  return b == 0xdc and hi ~= nil and lo ~= nil and hi * 256 + lo <= index
end
local function msg_field(m, i, index)  -- where field ``index`` (0-based) of the message at i starts, or nil
  local n
  n, i = msg_len(m, i)
  if n <= index then  -- (trailing defaults are left out: the array stops before the field)
    return nil
  end
  return fields_skip(m, i, index)
end
local function priority_at(m, at)  -- the priority field's value at ``at`` (nil: not encoded)
  local p = at and string.byte(m, at)
  if p and p <= 9 then  -- a positive fixint
    return p
  end
  return DEFAULT_PRIORITY
end
local function msg_priority(m, i)
  return priority_at(m, msg_field(m, i, PRIORITY_INDEX))
end
local RETRY_FRONT_INDEX = F.retry_front
local function retry_front_at(m, at)
  return at ~= nil and string.byte(m, at) == 0xc3  -- msgpack true
end
local function msg_retry_front(m, i)  -- the message (at i) asks its retries to go to the front
  return retry_front_at(m, msg_field(m, i, RETRY_FRONT_INDEX))
end
-- the string whose msgpack object starts at ``at`` (a tenant, a key), or nil: none, '', not a
-- string, or cut short (never a part of it)
local function str_at(m, at)
  local b = at and string.byte(m, at)
  if not b then return nil end
  local n, head
  if b >= 0xa1 and b <= 0xbf then  -- fixstr
    n, head = b - 0xa0, 1
  elseif b >= 0xd9 and b <= 0xdb then  -- str8, str16, str32
    local lenb = b == 0xd9 and 1 or (b == 0xda and 2 or 4)
    n, head = mp_uint(m, at + 1, lenb), 1 + lenb
  end
  if not n or n == 0 or at + head + n - 1 > #m then return nil end
  return string.sub(m, at + head, at + head + n - 1)
end
local tenant_at, key_at = str_at, str_at
local TENANT_INDEX = F.tenant
local function msg_tenant(m, i)  -- the tenant of the message at i, or nil (none: the tenant '')
  if msg_short(m, i, TENANT_INDEX) then
    return nil  -- (a message without a tenant, the usual case: its array stops before the field; no walk)
  end
  return tenant_at(m, msg_field(m, i, TENANT_INDEX))
end
local KEY_FIELD = F.key
local function msg_key(m, i)  -- the key of the message at i, or nil (none, '', or not a string)
  return key_at(m, msg_field(m, i, KEY_FIELD))
end
-- where the fields a due task's move reads start (nil: not encoded), found in one walk of the
-- message: priority, key, retry_front, tenant (their indices grow in that order: codec.py asserts it)
local function msg_tail(m, i)
  local n, at = msg_len(m, i)
  if n <= PRIORITY_INDEX then return nil end
  local p = fields_skip(m, at, PRIORITY_INDEX)
  if not p or n <= KEY_FIELD then return p end
  local k = fields_skip(m, p, KEY_FIELD - PRIORITY_INDEX)
  if not k or n <= RETRY_FRONT_INDEX then return p, k end
  local f = fields_skip(m, k, RETRY_FRONT_INDEX - KEY_FIELD)
  if not f or n <= TENANT_INDEX then return p, k, f end
  return p, k, f, fields_skip(m, f, TENANT_INDEX - RETRY_FRONT_INDEX)
end
local function msg_priority_tenant(m, i)  -- the priority and the tenant (nil: none) of the message at i, one walk
  local p, _, _, t = msg_tail(m, i)
  return priority_at(m, p), tenant_at(m, t)
end
