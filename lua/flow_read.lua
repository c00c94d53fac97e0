--[[ flow_read: (read only) a child's record, in one string as core/workflows/records.py parses it
KEY deps           deps hash: a child's record as fields (includes/flow)
ARG child          the child's id
Returns nil = no record; else rec_pack{policy, outstanding, since, due, ref1, state1, ref2, state2,
...} (a record written before the child was stored: no parents listed).
]]
--- @include "flow"
local child = A.child
local s = redis.call('HGET', K.deps, rec_field(child))
if not s then
  return nil
end
local h = rec_unpack(s)
if #h ~= 5 then  -- the former layout: already this string
  return s
end
local out = {h[1], h[2], h[3], h[4]}
local o = redis.call('HGET', K.deps, order_field(child))
if o then
  local refs = rec_unpack(o)
  local f = {}
  for i, r in ipairs(refs) do
    f[i] = edge_field(child, r)
  end
  local got = {}
  for i = 1, #f, 500 do
    local part = redis.call('HMGET', K.deps, unpack(f, i, math.min(#f, i + 499)))
    for _, v in ipairs(part) do
      got[#got + 1] = v
    end
  end
  for i, r in ipairs(refs) do
    out[#out + 1] = r
    out[#out + 1] = got[i] or ''
  end
end
return rec_pack(out)
