--- The batched acknowledgement of lua/done.lua (its header says what it takes and returns), as one
--- function, ack_done(), returning done's reply: done.lua returns it; done_dequeue.lua runs it before
--- its dequeue (the acknowledgement and the next dequeue of a busy worker in one call). A function,
--- not a block: it returns early (every item refused) and its locals stay in it.
--- @include "stored"
--- @include "exit"
local function ack_done()
  local INBOX_TTL_MS = 600000
  local plain = tonumber(A.plain)
  local items = A.items  -- (two layouts in one tail: not a stride; items[at(i) + d] is field d of task i)
  local n = plain + (items.n - 3 * plain) / 10
  local function at(i)  -- the index in items of task i's id
    if i <= plain then
      return 3 * i - 2
    end
    return 3 * plain + (i - plain - 1) * 10 + 1
  end
  local ids = {}
  for i = 1, plain do
    ids[i] = items[3 * i - 2]
  end
  for i = plain + 1, n do
    ids[i] = items[at(i)]
  end
  local vals = redis.call('HMGET', K.tasks, unpack(ids))
  local function sort_out()  -- each item's code; the tasks held (ok) and their items' positions (okpos)
    local out, ok, okpos, seen, m = {}, {}, {}, {}, 0
    for i = 1, n do
      local v, id = vals[i], ids[i]
      if not v or seen[id] then
        out[i] = 0  -- (an id named twice: its first entry deleted it, as calls one after the other would)
      elseif not stored_holds(v, items[at(i) + 1]) then
        out[i] = -3
      else
        seen[id] = true
        out[i] = 1
        m = m + 1
        ok[m] = id
        okpos[m] = i
      end
    end
    return out, ok, okpos, m
  end
  local all = true  -- every item held by the caller, the usual case: ok is ids, no tables built
  for i = 1, n do
    if not stored_holds(vals[i], items[at(i) + 1]) then
      all = false
      break
    end
  end
  local out, ok, okpos, m = false, ids, false, n
  if not all then
    out, ok, okpos, m = sort_out()
    if m == 0 then
      return out
    end
  end
  -- removals first: a Redis at maxmemory still lets a script that has written go on
  if redis.call('HDEL', K.tasks, unpack(ok)) < m then  -- (an id named twice: sorted out as above)
    out, ok, okpos, m = sort_out()
  end
  local function mark(i, code)  -- an item's code other than 1: the list of codes built at the first
    if not out then
      out = {}
      for j = 1, n do
        out[j] = 1
      end
    end
    out[i] = code
  end
  local mp = 0  -- how many of ok are plain items (they come first)
  if not okpos then
    mp = plain
  else
    while mp < m and okpos[mp + 1] <= plain do
      mp = mp + 1
    end
  end
  redis.call('ZREM', K.lease, unpack(ok))
  local conf = redis.call('HMGET', K.conf, 'events', 'concurrency')  -- (the cap and the limit: one read)
  local x = {t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, conf = K.conf, blobs = K.blobs,
             children = K.children,
             outbox = K.outbox, deps = K.deps, keyheld = K.keyheld, blocked = K.blocked, pending = K.pending,
             prio = K.prio, wake = K.wake, tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta,
             batch = {},  -- (the events: one entry per batch, exit_flush)
             flows = redis.call('EXISTS', K.children, K.deps) > 0,  -- a queue with workflows? (one command per batch)
             cap = tonumber(conf[1]) or EVENTS_CAP, unlimited = not conf[2]}
  events_conf(K.conf)  -- (the stream's count of events: includes/events)
  for k = 1, m do  -- the exit duty 'blob' of tasks read in place (includes/offload; e.msg is not given below)
    exit_blob(x, vals[okpos and okpos[k] or k], STORED_ACTIVE_AT)
  end
  if mp > 0 then  -- the plain items: their types read in place only when the events are on
    local mtypes, attempts, tenants = {}, {}, {}
    -- their tenants as the dequeue wrote them (ta: id -> tenant, one HMGET that tenant_left would
    -- make anyway): a message is walked for its tenant (~27 k instructions) only when ta has none
    local known = redis.call('HMGET', K.ta, unpack(ok, 1, mp))
    for k = 1, mp do
      local i = okpos and okpos[k] or k
      if x.cap > 0 then
        mtypes[k] = msg_type(vals[i], STORED_ACTIVE_AT)  -- (an active task's: stored_holds said so)
        tenants[k] = known[k] or msg_tenant(vals[i], STORED_ACTIVE_AT) or false  -- (false: none; a short message: one byte read)
      end
      attempts[k] = items[3 * i]
    end
    for _, k in ipairs(exit_plain(x, 'done', ok, mtypes, attempts, mp, tenants, known) or {}) do
      mark(okpos and okpos[k] or k, '!')
    end
  end
  local e = {how = 'done', id = '', msg = false, mtype = '', attempt = '', result = '', progressed = false, lock = false,
             key = '', keylist = false, tenant = false}  -- (one per batch, refilled for each task; every field present: no rehash)
  for k = mp + 1, m do
    local i = okpos and okpos[k] or k
    local base = at(i) - 1  -- (items[base + 1] = its id; the fields in the header's order)
    local lock, reply, keylist = items[base + 4], items[base + 5], items[base + 9]  -- (indexes; '0' = none)
    if reply ~= '0' then
      local inbox = K.extra[tonumber(reply)]
      redis.call('RPUSH', inbox, items[base + 6])
      redis.call('PEXPIRE', inbox, INBOX_TTL_MS)
    end
    local v = vals[i]
    e.id, e.mtype, e.attempt, e.result, e.progressed = ok[k], msg_type(v, STORED_ACTIVE_AT), items[base + 3],
      items[base + 8], items[base + 7] == '1'
    e.tenant = msg_tenant(v, STORED_ACTIVE_AT) or false
    e.lock = lock ~= '0' and K.extra[tonumber(lock)]
    e.key, e.keylist = items[base + 10], keylist ~= '0' and K.extra[tonumber(keylist)]
    if task_exit(x, e) then
      mark(i, '!')
    end
  end
  exit_flush(x)
  redis.call('INCRBY', K.processed, m)
  if redis.call('INCRBY', K.processed_day, m) == m then
    redis.call('EXPIRE', K.processed_day, tonumber(A.day_ttl))
  end
  local late = redis.call('HMGET', K.watch, unpack(ok))
  local gone = {}
  for k = 1, m do
    if late[k] then
      local i = okpos and okpos[k] or k
      mark(i, out and out[i] == '!' and late[k] .. ' !' or late[k])
      gone[#gone + 1] = ok[k]
    end
  end
  if #gone > 0 then
    redis.call('HDEL', K.watch, unpack(gone))
  end
  return out or n  -- (n: every item's code is 1, no list built)
end
