--[[ search: a bounded scan of a queue's tasks for the ones that match (read-only)
One step of Inspector.search (core/inspector/search.py): HSCAN of the tasks hash from ``cursor``,
in batches, until at least ``budget`` fields were looked at or the hash was scanned to its end, each
task checked in place (msgfield, msgpath: nothing decoded, nothing copied but what is sent back):
its state byte, type, tenant, enqueue time, a substring of its last error, and conditions on its
payload or headers; a task that matches is sent back (or only counted). The caller sizes
``budget`` so that a call stays within a few milliseconds and calls again with the cursor.
KEY tasks        the queue's tasks hash (id -> stored value: includes/stored)
ARG cursor       HSCAN cursor to go on from ('0' = from the start)
ARG budget       fields to look at in this call, at least one batch, about this many at most
ARG batch        HSCAN COUNT
ARG reply        'values' (each match's id and stored value), 'ids', or 'count' (only how many)
ARG match        HSCAN MATCH pattern of the ids ('*' = any; an id prefix, its glob characters escaped)
ARG states       the state bytes a match may have (includes/stored: p a s r x c g m w b; '' = any)
ARG type         a match's task type ('' = any)
ARG tenant       a match's tenant ('' = any)
ARG since        enqueued at or after this Unix ms ('' = no bound)
ARG before       enqueued before this Unix ms ('' = no bound)
ARG error        a substring of its last error ('' = any)
ARG text         a substring of its payload's encoded bytes ('' = any; an offloaded payload's
                 reference never matches: docs/search.md)
ARG conds... {where path value hint}  conditions, all of which a match meets:
                 where: 'p' its payload, 'h' its headers;
                 path: where the value is in it (names separated by '\0': map keys, array indexes
                 in digits; '' = the payload itself);
                 value: the value's msgpack encoding (smallest form, as the wire protocol writes
                 values: docs/protocol.md) it must equal; '' = present, whatever its value;
                 hint: bytes any match's message holds (the last key's encoding and the value's, as
                 a map stores them side by side; '' = none): looked for first (a plain find, in
                 C), so most tasks that do not match are passed over without walking their payload
Returns {next cursor ('0': the end), fields looked at, matches, then per match: id [, stored value]}.
]]
--- @include "stored"
--- @include "msgpath"
local budget, batch = tonumber(A.budget), tonumber(A.batch)
local states, mtype, tenant, err, text = A.states, A.type, A.tenant, A.error, A.text
local since, before = tonumber(A.since), tonumber(A.before)
local want = A.reply
local conds = A.conds
local nconds = conds.n
local F_PAYLOAD, F_HEADERS, F_ERROR, F_ENQUEUED = F.payload, F.headers, F.last_error, F.enqueued_at_ms

local function field_has(m, at, index, needle)  -- the field's encoded bytes hold ``needle``
  local found = string.find(m, needle, at, true)  -- (anywhere first: most tasks have it nowhere)
  if not found then return false end
  local i = msg_field(m, at, index)
  if not i then return false end
  local j = mp_skip(m, i)
  while found and found < i do
    found = string.find(m, needle, found + 1, true)
  end
  return found ~= nil and j ~= nil and found + #needle <= j
end

local function offloaded(m, at)  -- its payload is an offload reference (an ext value of type 70)
  local i = msg_field(m, at, F_PAYLOAD)
  local b = i and string.byte(m, i)
  local t = (b == 0xc7 and i + 2) or (b == 0xc8 and i + 3) or (b and b >= 0xd4 and b <= 0xd8 and i + 1)
  return t and string.byte(m, t) == 70
end

local function str_enc(x)  -- msgpack's smallest encoding of the string x
  local n = #x
  if n <= 31 then return string.char(0xa0 + n) .. x end
  if n <= 255 then return string.char(0xd9, n) .. x end
  return string.char(0xda, math.floor(n / 256), n % 256) .. x
end
local type_enc = mtype ~= '' and str_enc(mtype) or nil
local hints = {}  -- the conditions' hints, looked for before anything is walked (most tasks fail one)
for k = 1, nconds do
  if conds[k].hint ~= '' then hints[#hints + 1] = conds[k].hint end
end
local nhints = #hints

local function matches(v)
  local at = stored_at(v)
  for k = 1, nhints do
    if not string.find(v, hints[k], at, true) then return false end
  end
  if states ~= '' and not string.find(states, stored_state(v), 1, true) then return false end
  if type_enc then  -- the type, field 0, compared in place (after the array's header: 1 or 3 bytes)
    local b = string.byte(v, at)
    local i = (b == 0xdc and at + 3) or at + 1
    if string.find(v, type_enc, i, true) ~= i then
      local h = string.byte(v, i)  -- (a str8/16/32 header where a shorter one would do: another writer's)
      if not (h == 0xd9 or h == 0xda or h == 0xdb) then return false end
      local s, n = mp_str(v, i)
      if n ~= #mtype or string.sub(v, s, s + n - 1) ~= mtype then return false end
    end
  end
  if tenant ~= '' and msg_tenant(v, at) ~= tenant then return false end
  if since or before then
    local i = msg_field(v, at, F_ENQUEUED)
    local t = i and mp_int(v, i) or 0
    if (since and t < since) or (before and t >= before) then return false end
  end
  if err ~= '' and not field_has(v, at, F_ERROR, err) then return false end
  if text ~= '' and (not field_has(v, at, F_PAYLOAD, text) or offloaded(v, at)) then return false end
  for k = 1, nconds do
    local c = conds[k]
    local i = msg_field(v, at, c.where == 'h' and F_HEADERS or F_PAYLOAD)
    i = i and mp_at(v, i, c.path)
    if not i or (c.value ~= '' and not mp_equals(v, i, c.value)) then return false end
  end
  return true
end

local cursor, looked, found, out = A.cursor, 0, 0, {'', 0, 0}
repeat
  local r = redis.call('HSCAN', K.tasks, cursor, 'MATCH', A.match, 'COUNT', batch)
  cursor = r[1]
  local fv = r[2]
  for j = 1, #fv, 2 do
    local v = fv[j + 1]
    if matches(v) then
      found = found + 1
      if want ~= 'count' then
        out[#out + 1] = fv[j]
        if want == 'values' then
          out[#out + 1] = v
        end
      end
    end
  end
  -- with MATCH a batch returns the ids that match alone: the fields it walked (about COUNT) count
  looked = looked + (A.match == '*' and #fv / 2 or batch)
until cursor == '0' or looked >= budget
out[1], out[2], out[3] = cursor, looked, found
return out
