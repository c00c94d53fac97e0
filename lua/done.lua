--[[ done: active -> (deleted), for a batch of tasks of one queue
Handlers succeeded and the tasks keep no result (retention 0): delete each task the caller still
holds, release its uniqueness lock, push its outcome to the inbox of a client waiting through
Client.call, and count the batch as processed. A worker acknowledges every such task that finished
since its last write in one call (one script per queue per batch); a batch of one is the single
case. A task the caller no longer holds is left untouched (its code says why); the others proceed.
Events: one 'completed' entry per type and attempt for the batch (ids listed), and one 'enqueued'
entry for the keys' next tasks (includes/exit ``batch``), not an XADD per task.
KEY tasks              tasks hash
KEY lease              lease zset
KEY processed          lifetime processed counter
KEY processed_day      today's processed counter
KEY progress           progress hash (the tasks' entries are cleared)
KEY watch              watch hash: id -> inbox ids of late waiters
KEY @exit
KEY deps               deps hash: a child's record (its parents' results), deleted with the task
KEY extra...           the uniqueness locks, waiting clients' inboxes and keys' lists of the batch,
                       named by index j from ARGV: K.extra[j] (only tasks that have one)
ARG day_ttl            seconds to keep a daily counter
ARG plain              how many of the items come first, in the short form: tasks with no lock, no
                       waiting client, no progress written, no result and no key (the usual
                       no-op success: 3 arguments instead of 10, and includes/exit exit_plain)
ARG items...     ``plain`` groups of 3 (id, token, attempt), then one group of 10 per other task:
        id
        token          the lease token the task was dequeued with
        attempt        the attempt's number (for the event)
        lock           index j of the task's uniqueness lock in K.extra[j], 0 = not unique
        reply          index j of the waiting client's inbox in K.extra[j], 0 = nobody waits
        payload        the outcome for that client (msgpack [id, 'c', result]), '' = none
        progressed     1 = the run wrote progress (its entry is cleared), 0 = it did not (an
                       attempt starts with no entry: every script that ends one clears it)
        result         the handler's result (msgpack; '' = None), for the task's children
        keylist        index j of the task's key's list in K.extra[j], 0 = no key
        key            the task's key ('' = none): released to the next task of the key
Returns the number of items when every one's code is 1 (the usual batch: no list built), else
one code per task, in the items' order: 1 = done (or a string: done, and the inbox ids of late
waiters to notify, with the token '!' if tasks waiting on it were told: includes/flow),
0 = no such task, -3 = the caller no longer holds the lease (write refused).
]]
--- @include "stored"
--- @include "exit"
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
local x = {t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, conf = K.conf, children = K.children,
           outbox = K.outbox, deps = K.deps, keyheld = K.keyheld, blocked = K.blocked, pending = K.pending,
           prio = K.prio, wake = K.wake, tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta,
           batch = {},  -- (the events: one entry per batch, exit_flush)
           flows = redis.call('EXISTS', K.children, K.deps) > 0,  -- a queue with workflows? (one command per batch)
           cap = tonumber(conf[1]) or EVENTS_CAP, unlimited = not conf[2]}
events_conf(K.conf)  -- (the stream's count of events: includes/events)
if mp > 0 then  -- the plain items: their types read in place only when the events are on
  local mtypes, attempts, tenants = {}, {}, {}
  for k = 1, mp do
    local i = okpos and okpos[k] or k
    if x.cap > 0 then
      mtypes[k] = msg_type(vals[i], STORED_ACTIVE_AT)  -- (an active task's: stored_holds said so)
      tenants[k] = msg_tenant(vals[i], STORED_ACTIVE_AT) or false  -- (false: none; a short message: one byte read)
    end
    attempts[k] = items[3 * i]
  end
  for _, k in ipairs(exit_plain(x, 'done', ok, mtypes, attempts, mp, tenants) or {}) do
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
