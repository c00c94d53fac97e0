--- Workflows (docs/workflows.md, docs/architecture.md "Workflows across slots"): records, and
--- the parent's side of an edge.
---
--- rec_pack(list) / rec_unpack(s): a list of byte strings as one string, each item written as
--- '<length>:<bytes>' (any bytes: results are msgpack). core/workflow.py reads and writes the same.
---
--- A child's record, in its queue's deps hash (child id -> record): {policy, outstanding, since,
--- due, ref1, state1, ref2, state2, ...}. policy: 'c' (cancel when a parent fails), 'r' (run anyway),
--- 'i' (ignore a failed parent); '' = a record written by resolve before the child was stored
--- (the parent ended in the moment between the child's registration and its storing). outstanding:
--- how many parents have not ended. since: ms. due: when it may run once released (ms, Redis
--- clock; '0' = at once). ref: the parent, rec_pack{queue, id}. state: '' =
--- not ended; 'c' .. result (msgpack) = completed; 'x' = archived; 'd' = deleted.
---
--- A parent's children, in its queue's children hash (parent id -> rec_pack of child refs, each
--- rec_pack{queue, id}; appended to, never searched: a ref twice is harmless, resolve is
--- idempotent). Kept while the parent is stored (the workflow's tree), deleted with it (done,
--- delete_tasks, and the janitor's forget_gone sweep for tasks expired or trimmed).
local function rec_unpack(s)
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = string.find(s, ':', i, true)
    local len = tonumber(string.sub(s, i, c - 1))
    out[#out + 1] = string.sub(s, c + 1, c + len)
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
