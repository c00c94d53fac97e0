--- Workflows (docs/workflows.md, docs/internals-features.md "Workflows across slots"): records, and
--- the parent's side of an edge.
---
--- rec_pack(list) / rec_unpack(s): a list of byte strings as one string, each item written as
--- '<length>:<bytes>' (any bytes: results are msgpack). core/workflows/records.py reads and writes the same.
---
--- A child's record, in its queue's deps hash, as fields of their own so that an edge touches
--- O(1) bytes (a parent's end is one field; a fan-in of P parents costs O(P), not O(P^2)):
---   rec_field(child)        the header: rec_pack{policy, outstanding, since, due, failed}
---   edge_field(child, ref)  one parent's end: its state
---   order_field(child)      rec_pack of the parents' refs in the order given (written once, when
---                           the child is stored; read by readers and when the record is forgotten)
--- policy: 'c' (cancel when a parent fails), 'r' (run anyway), 'i' (ignore a failed parent); '' =
--- a record written by resolve before the child was stored (the parent ended in the moment between
--- the child's registration and its storing: its edge fields hold those ends, no order field).
--- outstanding: how many (distinct) parents have not ended. since: ms. due: when it may run once
--- released (ms, Redis clock; '0' = at once). failed: how many parents were archived or deleted.
--- ref: the parent, rec_pack{queue, id}. state: '' = not ended; 'c' .. result (msgpack) =
--- completed; 'x' = archived; 'd' = deleted. Field names: the header is the child's id (an id
--- starting with a NUL byte gets one more in front); every other field starts with NUL and a
--- letter ('e' edge, 'o' order), so no name of one kind can be one of another.
--- A header in the layout before this one (rec_pack{policy, outstanding, since, due, ref1, state1,
--- ...}, 6 items or more) is split into fields the first time a script loads it (rec_header).
---
--- A parent's children, in its queue's children hash (parent id -> rec_pack of child refs, each
--- rec_pack{queue, id}; appended to, never searched: a ref twice is harmless, resolve is
--- idempotent). Kept while the parent is stored (the workflow's tree), deleted with it (done,
--- delete_tasks, and the janitor's forget_gone sweep for tasks expired or trimmed).
local function rec_len(s, i, c)  -- the length written at s[i..c-1]: digits (nil: not digits)
  local d = c - i
  if d == 1 then
    local a = string.byte(s, i) - 48
    return a >= 0 and a <= 9 and a or nil
  elseif d == 2 then
    local a, b = string.byte(s, i, c - 1)
    a, b = a - 48, b - 48
    return a >= 0 and a <= 9 and b >= 0 and b <= 9 and a * 10 + b or nil
  end
  return tonumber(string.sub(s, i, c - 1))
end
local function rec_unpack(s)  -- (a length of one or two digits read as bytes: each string function
  -- Lua calls costs ~700 instructions; a record's 13 items read in ~30 k instead of ~44 k)
  local out, i, n, k = {}, 1, #s, 0
  while i <= n do
    local c = string.find(s, ':', i, true)
    local len = c and rec_len(s, i, c)
    if not len or c + len > n then
      error('rec_unpack: not a record (an item without its length, or cut short, at byte ' .. i .. ')')
    end
    k = k + 1
    out[k] = string.sub(s, c + 1, c + len)
    i = c + len + 1
  end
  return out
end
local function rec_item(v)
  return #v .. ':' .. v
end
local function rec_pack(t)
  local parts = {}
  for k, v in ipairs(t) do
    parts[k] = rec_item(v)
  end
  return table.concat(parts)
end


--- The field names of a child's record (see above).
local function rec_field(id)
  if string.byte(id, 1) == 0 then
    return '\0' .. id
  end
  return id
end
local function edge_field(id, ref)
  return '\0e' .. rec_pack({id, ref})
end
local function order_field(id)
  return '\0o' .. id
end

--- hdel_all(key, fields): HDEL the list ``fields`` (in chunks: Lua's unpack has a stack limit).
local function hdel_all(key, fields)
  for i = 1, #fields, 500 do
    redis.call('HDEL', key, unpack(fields, i, math.min(#fields, i + 499)))
  end
end

--- rec_header(deps, id): the child's header as a list {policy, outstanding, since, due, failed},
--- or nil when it has no record. A record in the former layout (one string, every edge in it) is
--- split into fields first (once: O(P)).
local function rec_header(deps, id)
  local s = redis.call('HGET', deps, rec_field(id))
  if not s then
    return nil
  end
  local r = rec_unpack(s)
  if #r == 5 then
    return r
  end
  local refs, failed = {}, 0
  for i = 5, #r - 1, 2 do
    redis.call('HSET', deps, edge_field(id, r[i]), r[i + 1])
    refs[#refs + 1] = r[i]
    if r[i + 1] == 'x' or r[i + 1] == 'd' then
      failed = failed + 1
    end
  end
  local h = {r[1], r[2], r[3], r[4], tostring(failed)}
  if r[1] ~= '' then
    redis.call('HSET', deps, order_field(id), rec_pack(refs))
  end
  redis.call('HSET', deps, rec_field(id), rec_pack(h))
  return h
end

--- rec_forget(deps, id): the child's record goes (header, order, edges): a deleted task's. One
--- HGET when it has none (a task that waited on no parent).
local function rec_forget(deps, id)
  local hf = rec_field(id)
  if redis.call('HEXISTS', deps, hf) == 0 then
    return
  end
  local of = order_field(id)
  local fields = {hf, of}
  local o = redis.call('HGET', deps, of)
  if o then
    for _, r in ipairs(rec_unpack(o)) do
      fields[#fields + 1] = edge_field(id, r)
    end
  end
  hdel_all(deps, fields)
end

--- rec_child(field): (kind, child id) of a field of the deps hash: 'h' header, 'e' edge, 'o'
--- order (the janitor's sweep reads the hash by fields).
local function rec_child(field)
  if string.byte(field, 1) ~= 0 then
    return 'h', field
  end
  local k, rest = string.byte(field, 2), string.sub(field, 3)
  if k == 0 then  -- an id starting with NUL
    return 'h', '\0' .. rest
  elseif k == 101 then  -- 'e'
    return 'e', rec_unpack(rest)[1]
  end
  return 'o', rest
end

--- tell_children(children, outbox, id, outcome, result): the parent ``id`` ended (outcome 'c'
--- completed with ``result`` (msgpack, '' = none), 'x' archived, 'd' deleted): if children wait
--- on it, write the end to the queue's outbox stream (propagators deliver it to each child, in
--- the child's own slot). Returns true if it had children. (An end told again, after a re-run of
--- an archived parent, changes nothing: each child's record counts a parent's end once.)
local function tell_children(children, outbox, id, outcome, result)
  local kids = redis.call('HGET', children, id)
  if not kids then
    return false
  end
  redis.call('XADD', outbox, '*', 'p', id, 'o', outcome, 'r', result or '', 'k', kids)
  return true
end

--- told(code, notified): a finishing script's reply (1, or the late waiters' inbox ids) marked
--- with the token '!' when children were told (the worker then runs its propagator at once).
local function told(code, notified)
  if not notified then
    return code
  end
  if code == 1 then
    return '!'
  end
  return code .. ' !'
end
