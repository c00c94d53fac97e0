--[[ dequeue: pending -> active (with a lease)
Takes up to `count` tasks and leases them to the caller until now + lease: first runs of
targeted tasks the caller (worker `name`) may take (includes/runs: those naming it, then those
any worker may run; a task it runs, has succeeded or failed on, or whose runs are all taken, is
passed over; one whose run on it expired may be taken again), then pending
tasks, the highest priority first (includes/priority: priorities 9..6 from the prio zset, then the
default priority from the right of the pending list, oldest first, then priorities 4..0). A paused queue yields nothing. If tasks remain, one wake-up token is left
so another idle worker comes to help.
Tenants (includes/priority; docs/architecture.md "Tenants"): while any tenant has pending tasks
(the ring ``tr`` exists), the tasks are handed out in turns: each turn goes to the tenant of the
least pass in the ring (ties by name), which then grows by its stride; the tasks without a tenant
are the tenant '' (put in the ring at the virtual time when they wait and it is not there). One
call reads at most count+1 ring entries and merges the turns in Lua (the (count+1)-th entry read
bounds them: a tenant not read may come before its next turn), then takes each tenant's tasks
with one ZRANGE BYLEX of its range (k+1 members: the extra one says whether it stays in the
ring); a tenant left with none leaves the ring. With no tenant the path is the plain one, plus
one EXISTS. The queue's virtual time (``tn`` 'v') is the last turn's pass; when no tenant has
work, ``tn`` is deleted.
A tenant whose rate allows no task now leaves the ring for ``tw`` (tenant -> when its next task
conforms); each dequeue first puts those due, or whose rate is gone, back in the ring at V (one
ZRANGE of tw's first count+1, and one HMGET of their settings while some are not due). The passes
are rebased (each pass and V less V) when V reaches PASS_REBASE (includes/priority).
KEY tasks        tasks hash
KEY @pending
KEY lease        lease zset: id -> lease expiry (ms, Redis clock)
KEY paused       paused flag (exists = paused)
KEY wake         wake-up list
KEY @events      (conf's fields 'active' and 'followed': whether 'active' events are written,
                 includes/events active_wanted)
KEY runs         runs hash: targeted task id -> record (includes/runs)
KEY mine         index of the targeted tasks naming the caller ('m:w:<name>')
KEY targeted_any       index of the targeted tasks any worker may run ('m:*')
KEY scheduled       scheduled zset (held tasks wait there: includes/hold)
KEY tw       the queue's tenants held by their rate: tenant -> ms its next task conforms (includes/priority)
ARG count        how many tasks at most
ARG lease_ms      lease duration in ms
ARG token        8-character lease token; the worker proves ownership with it later
ARG now          '' = Redis time; else a simulated time in ms
ARG name         the caller's worker name ('' = take no runs of targeted tasks)
ARG version      the caller's version (core/deploy.py encode_version; 0 = none)
Deploy holds (includes/hold): a pending task of a blocked type (conf field 'holds'), or one that
needs a newer worker than the caller, is not leased but held in the scheduled zset (state 's');
one without a tenant uses one of the ``count``. A tenant's task is checked as its tenant's turn takes it, before
anything is counted: a held one takes no tenant slot, no token of its tenant's rate and no turn
(the tenant takes its next task instead). A targeted task of a blocked type
gives no run (it stays targeted; min_worker_version is refused for targeted tasks). A caller with a version first
takes back to the front of the pending tasks up to ``count`` tasks held for versions up to its own.
The queue's limits (conf fields, set by Inspector.set_limits): 'concurrency' = at most this many
of its tasks active across all workers (the lease zset's size); 'rate' (tasks per second) and
'burst' = a token bucket ('tokens', 'ts' its state) that each task taken uses one token of.
Returns {now, remaining, wait, id1, msg1, id2, msg2, ...} (a run's id is '<task id>|<name>', its
message the task's); remaining (pending tasks left; runs of targeted tasks are not counted) = -1
when the queue is paused;
wait = 0, or, when a limit held tasks back, ms before a dequeue may get one: the next token of the
rate limit, or -LIMIT_WAIT for a full concurrency limit (negative: unless a slot frees sooner). A limited dequeue leaves no
wake-up token (the workers it would wake could take nothing either).
The rate's waiter (conf fields 'waiter', 'waiter_until'): of the workers the rate holds back, ONE
(`name`, the first held back while no other waits) is told when the next token is due (wait > 0)
and is expected until then + RATE_GRACE; every other one sleeps on the wake list (a wake-up
token, or its wait, ends it): the next token draws one worker, not all of them. Their waits
(negative) end at least LIMIT_WAIT from now, not before the waiter's turn lapses, and POLL_STEP
apart (conf field 'polls': when the last of them is told to look again), at most POLL_MAX from
now: up to 40 of them look at most 4 times a second in all (the fallback, should the waiter not
come); more, each every POLL_MAX (which a worker's idle wait caps anyway: no schedule runs away).
The waiter that comes and is held back again stays the waiter; one that takes its tokens and
wants no more (or a waiter gone past its turn) leaves the turn to the next held back. A dequeue that uses up the bucket while tasks remain wakes one
worker only when no other waiter is expected (it comes, is held back and becomes the waiter).
Ids whose data is missing, or whose task is not pending (a stray copy of an id: corruption by
hand), are dropped from the list; only pending tasks are leased, each once. The batch costs one
HMGET, one HSET and one ZADD however many tasks it takes (plus, when 'active' events are wanted, one
XADD per task type taken); the prio zset is read only when ZCARD finds it non-empty (its size gives
'remaining'), and an id popped twice is found by ZADD's count of new members (leased once).
]]
--- @include "now"
--- @include "signal"
--- @include "events"
--- @include "priority"
--- @include "runs"
--- @include "stored"
--- @include "hold"
local LIMIT_WAIT = 1000
local RATE_GRACE = 500  -- ms the rate's waiter may be late for its token before another takes its turn
local POLL_STEP = 250  -- ms between two looks of the workers the rate's waiter stands for (at most 4 a second)
local TENANT_STRIDE = 1000  -- a turn's growth of a tenant's pass (weight 1)
local POLL_MAX = 10000  -- ms: the longest they are told to sleep (a worker's idle wait, 10 s by default)
local now = now_ms(A.now)
if redis.call('EXISTS', K.paused) == 1 then
  return {now, -1, 0}
end
local conf = redis.call('HMGET', K.conf, 'events', 'concurrency', 'rate', 'burst', 'tokens', 'ts', 'waiter',
  'waiter_until', 'polls', 'active', 'followed', 'holds')
local count, wait = tonumber(A.count), 0
local limit = tonumber(conf[2])
if limit then
  local free = limit - redis.call('ZCARD', K.lease)
  if free < count then
    count = math.max(free, 0)
    wait = -LIMIT_WAIT  -- negative: held back by the concurrency limit (a freed slot ends it sooner)
  end
end
local rate, tokens, bucket, rate_held = tonumber(conf[3]), 0, false, false
if rate and count > 0 then
  bucket = true
  local burst = tonumber(conf[4]) or 1
  tokens = tonumber(conf[5]) or burst
  local ts = tonumber(conf[6]) or now
  tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
  if tokens < count then
    count = math.floor(tokens)
    wait = math.max(1, math.ceil((1 - (tokens - count)) * 1000 / rate))
    rate_held = true
  end
end
local out = {now, 0, 0}
local version, holds = tonumber(A.version) or 0, conf[12]
local runs = {}  -- id, message pairs of the runs taken
if count > 0 and A.name ~= '' and redis.call('EXISTS', K.runs) == 1 then  -- (no targeted task: no scan)
  local name, seen, open = A.name, {}, false
  for _, index in ipairs({K.mine, K.targeted_any}) do
    for _, tid in ipairs(count > 0 and redis.call('ZRANGE', index, 0, RUN_SCAN - 1) or {}) do
      if count > 0 and not seen[tid] then
        seen[tid] = true
        local v = redis.call('HGET', K.tasks, tid)
        local rec = redis.call('HGET', K.runs, tid)
        if not v or stored_state(v) ~= 'm' or not rec then
          redis.call('ZREM', index, tid)  -- the task is gone (deleted by hand): a stale entry
        else
          local r = rec_parse(rec)
          local mine = r.states[name]
          if (not mine or mine[1] == 'e') and rec_allows(r, name) and rec_count(r, 'r') + rec_count(r, 's') < r.n
              and not type_held(holds, v) then  -- (a blocked type's runs wait in place: includes/hold)
            if not mine then  -- (taken again after its lease expired: its entry is reused, not doubled)
              r.order[#r.order + 1] = name
            end
            r.states[name] = {'r', tostring(now)}
            redis.call('HSET', K.runs, tid, rec_build(r))
            runs[#runs + 1] = tid .. '|' .. name
            runs[#runs + 1] = stored_msg(v)
            count = count - 1
            open = open or (r.allowed == '*' and rec_count(r, 'r') + rec_count(r, 's') < r.n)
          end
        end
      end
    end
  end
  if open then  -- runs are left for other workers: wake one (it takes one and wakes the next)
    signal(K.wake)
  end
end
local pk = {K.pending, K.prio, K.tq, K.tr, K.tn, K.ta}
if version > 0 and count > 0 then  -- tasks held for a version up to the caller's: back to the front
  local back = redis.call('ZRANGE', K.scheduled, string.format('%.0f', VERSION_BAND),
    string.format('%.0f', VERSION_BAND + version), 'BYSCORE', 'LIMIT', 0, count)  -- (16 digits: '%.0f')
  for j = #back, 1, -1 do  -- (each to the front: the last first, so they keep their order)
    local id = back[j]
    local v = redis.call('HGET', K.tasks, id)
    redis.call('ZREM', K.scheduled, id)
    if stored_state(v) == 's' then
      redis.call('HSET', K.tasks, id, 'p' .. stored_msg(v))
      push_pending(pk, id, v, 2, true)
    end
  end
end
local prios = redis.call('ZCARD', K.prio)  -- (none, the usual case: the zset is not read)
local held_any = false  -- a task taken was held (includes/hold): it used one of count, not a slot
local fair_vals = {}  -- id -> stored value of the tenant tasks take_fair hands out (read once)
local function take_plain(n)  -- up to n pending ids without a tenant, in priority order
  local ids = {}
  if prios > 0 then
    ids = redis.call('ZRANGE', K.prio, '-inf', '(' .. string.format('%.0f', HIGH_END), 'BYSCORE', 'LIMIT', 0, n)
    if #ids > 0 then
      redis.call('ZREM', K.prio, unpack(ids))
      prios = prios - #ids
    end
  end
  if #ids < n then
    local popped = redis.call('RPOP', K.pending, n - #ids)
    if popped then
      if #ids == 0 then
        ids = popped
      else
        for _, id in ipairs(popped) do
          ids[#ids + 1] = id
        end
      end
    end
    if #ids < n and prios > 0 then  -- (the higher priorities are all taken)
      local low = redis.call('ZRANGE', K.prio, 0, n - #ids - 1)
      if #low > 0 then
        redis.call('ZREM', K.prio, unpack(low))
        prios = prios - #low
        for _, id in ipairs(low) do
          ids[#ids + 1] = id
        end
      end
    end
  end
  return ids
end
local function rate_held_back(tw, ring, tn, n, vt, settings, defaults)
  -- tenants held by their rate (tw) whose next task conforms now, or whose rate is gone (the queue's
  -- defaults or its own settings changed): back in the round at V (NX: one a push put back keeps its pass)
  local heads = redis.call('ZRANGE', tw, 0, n, 'WITHSCORES')
  if #heads == 0 then
    return false
  end
  local back, names, check = {}, {}, {}
  for j = 1, #heads, 2 do
    if tonumber(heads[j + 1]) <= now or not settings then
      names[#names + 1] = heads[j]
    else
      check[#check + 1] = heads[j]
    end
  end
  if #check > 0 then
    local fields = {}
    for j, name in ipairs(check) do
      fields[j] = 'l:' .. name
    end
    local ls = redis.call('HMGET', tn, unpack(fields))
    for j, name in ipairs(check) do
      local _, _, _, r = tenant_settings(ls[j], defaults)
      if r <= 0 then
        names[#names + 1] = name
      end
    end
  end
  if #names > 0 then
    for _, name in ipairs(names) do
      back[#back + 1], back[#back + 2] = string.format('%.0f', vt), name
    end
    redis.call('ZREM', tw, unpack(names))
    redis.call('ZADD', ring, 'NX', unpack(back))
  end
  return true  -- (tw existed: a tenant the dequeue serves may be in it too)
end
local function rebase(ring, vt)  -- passes back near 0 (each less V): they stay exact, and V with them
  local all = redis.call('ZRANGE', ring, 0, -1, 'WITHSCORES')
  local args = {}
  for j = 1, #all, 2 do
    args[#args + 1], args[#args + 2] = string.format('%.0f', tonumber(all[j + 1]) - vt), all[j]
  end
  if #args > 0 then
    redis.call('ZADD', ring, unpack(args))
  end
  return 0
end
local function take_fair(n)  -- up to n pending ids, in turns across the tenants (includes/priority)
  local tq, ring, tn, tw = K.tq, K.tr, K.tn, K.tw
  local head = redis.call('HMGET', tn, 'v', 'o', 'd')
  local defaults = head[3]  -- (o: tenants with settings of their own; d: the queue's defaults for the others)
  local vt, settings = tonumber(head[1] or '0'), tonumber(head[2] or '0') > 0 or defaults ~= false
  if redis.call('LLEN', K.pending) + prios > 0 and not redis.call('ZSCORE', ring, '') then
    redis.call('ZADD', ring, string.format('%.0f', vt), '')  -- the tasks without a tenant take their turns as the tenant ''
  end
  local waiting = rate_held_back(tw, ring, tn, n, vt, settings, defaults)  -- (tenants held by their rate)
  local ids, active, bucket = {}, {}, {}
  for _ = 1, 8 do  -- (rounds: another only when a tenant had fewer tasks than its turns)
    local want = n - #ids
    local heads = want > 0 and redis.call('ZRANGE', ring, 0, want, 'WITHSCORES') or {}
    if #heads == 0 then
      break
    end
    local names, pass, turns, stride, free, m = {}, {}, {}, {}, {}, #heads / 2
    local cfree = {}  -- free slots of each tenant's concurrency (free: of its tokens too)
    for j = 1, m do
      names[j], pass[j], turns[j], stride[j] = heads[2 * j - 1], tonumber(heads[2 * j]), 0, TENANT_STRIDE
      free[j], cfree[j] = math.huge, math.huge
    end
    if settings then  -- weights (a tenant of weight w takes w turns to one of weight 1), pauses, concurrency
      local fields, out, held = {}, {}, {}
      for j = 1, m do
        fields[3 * j - 2], fields[3 * j - 1], fields[3 * j] = 'l:' .. names[j], 'a:' .. names[j], 'k:' .. names[j]
      end
      local ls = redis.call('HMGET', tn, unpack(fields))
      for j = 1, m do
        local w, p, c, r, b = tenant_settings(ls[3 * j - 2], defaults)
        stride[j] = math.floor(TENANT_STRIDE / w + 0.5)
        if c > 0 and names[j] ~= '' then
          free[j] = c - (tonumber(ls[3 * j - 1]) or 0)
          cfree[j] = free[j]
        end
        if (p or free[j] <= 0) and names[j] ~= '' then  -- (paused, or at its concurrency: out of the ring)
          out[#out + 1] = names[j]
          pass[j] = math.huge
        elseif r > 0 and names[j] ~= '' and pass[j] ~= math.huge then  -- its rate (includes/priority)
          local allow, eff = tenant_rate(ls[3 * j], r, b, now)
          bucket[names[j]] = {eff, r, b}
          free[j] = math.min(free[j], allow)
          if free[j] <= 0 then  -- none allowed now: held by its rate (out of the ring, in tw)
            held[#held + 1], held[#held + 2] = string.format('%.0f', tenant_rate_due(eff, r, b)), names[j]
            out[#out + 1] = names[j]
            pass[j] = math.huge
          end
        end
      end
      if #out > 0 then
        redis.call('ZREM', ring, unpack(out))
      end
      if #held > 0 then
        redis.call('ZADD', tw, unpack(held))
        waiting = true
      end
    end
    local pass0 = {}  -- (each tenant's pass before this round's turns)
    for j = 1, m do
      pass0[j] = pass[j]
    end
    -- the (want+1)-th tenant read bounds the turns: tenants not read may come before its next one
    local bound = m == want + 1 and m or nil
    for _ = 1, want do
      local b = 1
      for j = 2, m do
        if pass[j] < pass[b] or (pass[j] == pass[b] and names[j] < names[b]) then
          b = j
        end
      end
      if b == bound or pass[b] == math.huge then
        break
      end
      turns[b] = turns[b] + 1
      vt = pass[b]
      pass[b] = turns[b] < free[b] and pass[b] + stride[b] or math.huge  -- (at its concurrency: no more)
    end
    local moved, left, members, parked, unpark = {}, {}, {}, {}, {}
    local ranges, tids = {}, {}  -- each tenant's range read, and the ids in them (one HMGET for the round)
    for j = 1, m do
      if turns[j] > 0 and names[j] ~= '' then
        local name = names[j]
        ranges[j] = redis.call('ZRANGE', tq, '[' .. name .. '\0', '(' .. name .. '\1', 'BYLEX', 'LIMIT', 0, turns[j] + 1)
        for i = 1, math.min(turns[j], #ranges[j]) do
          tids[#tids + 1] = string.sub(ranges[j][i], #name + 19)
        end
      end
    end
    local vals = #tids > 0 and redis.call('HMGET', K.tasks, unpack(tids)) or {}
    local at, short = 0, false  -- (short: a tenant's turn met a held task: another round)
    for j = 1, m do
      local k, name = turns[j], names[j]
      if k > 0 then
        local given, held_n, more = 0, 0, false  -- (held_n: its tasks held, which count for nothing)
        if name == '' then
          local got = take_plain(k)
          for _, id in ipairs(got) do
            ids[#ids + 1] = id
          end
          given, more = #got, redis.call('LLEN', K.pending) + prios > 0
        else
          local range = ranges[j]
          for i = 1, math.min(k, #range) do
            local id = string.sub(range[i], #name + 19)
            at = at + 1
            members[#members + 1] = range[i]
            local msg = stored_msg_if(vals[at], 'p')  -- (a stray copy of an id, not pending: dropped)
            local score = msg and hold_score(holds, vals[at], version, K.conf)
            if score then  -- not for this worker: held before it counts (no slot, no token, no turn)
              redis.call('HSET', K.tasks, id, 's' .. msg)
              redis.call('ZADD', K.scheduled, string.format('%.0f', score), id)
              held_n, short, held_any = held_n + 1, true, true
            elseif msg then
              ids[#ids + 1], fair_vals[id] = id, vals[at]
              active[#active + 1] = id  -- (its tenant slot, counted for every tenant so that a limit set
              active[#active + 1] = name  -- while its tasks run counts them: includes/priority tenant_left)
              given = given + 1
            end
          end
          if given > 0 then
            redis.call('HINCRBY', tn, 'a:' .. name, given)
          end
          more = #range > k
        end
        local bk = bucket[name]
        local due = false  -- (with a rate: when its next task conforms)
        if bk and given > 0 then  -- its schedule moves on by the tasks started (kept until it says nothing more: tenant_rest)
          bk[1] = bk[1] + given * 1000 / bk[2]
          tenant_rate_set(tn, name, bk[1])
          due = tenant_rate_due(bk[1], bk[2], bk[3])
        end
        local capped = given >= free[j]  -- (its concurrency, or its rate: no more now)
        local by_rate = due and more and due > now and cfree[j] > given  -- (not its concurrency)
        if by_rate then  -- no task allowed now: held by its rate until the next one conforms
          left[#left + 1] = name
          parked[#parked + 1] = string.format('%.0f', due)
          parked[#parked + 1] = name
        elseif not more or capped then  -- out of the ring (a held tenant is put back by the exit of one of its tasks)
          left[#left + 1] = name
          unpark[#unpark + 1] = name
        else
          moved[#moved + 1] = string.format('%.0f', pass0[j] + given * stride[j])
          moved[#moved + 1] = name
          unpark[#unpark + 1] = name
        end
      end
    end
    if #left > 0 then
      redis.call('ZREM', ring, unpack(left))
    end
    if #moved > 0 then
      redis.call('ZADD', ring, unpack(moved))
    end
    if #members > 0 then
      redis.call('ZREM', tq, unpack(members))
    end
    if waiting and #unpark > 0 then  -- (a tenant a push put back in the ring while held: not held now)
      redis.call('ZREM', tw, unpack(unpark))
    end
    if #parked > 0 then
      redis.call('ZADD', tw, unpack(parked))
      waiting = true
    end
    if #ids >= n or (#left == 0 and not bound and not short) then
      break
    end
  end
  if #active > 0 then
    redis.call('HSET', K.ta, unpack(active))
  end
  if redis.call('EXISTS', ring) == 0 and redis.call('EXISTS', tq) == 0 then
    tenant_rest(tn, now)  -- no tenant has work: the virtual time and seq start again (full buckets go)
    if waiting then
      redis.call('DEL', tw)
    end
  else
    if vt >= PASS_REBASE then
      vt = rebase(ring, vt)
    end
    redis.call('HSET', tn, 'v', string.format('%.0f', vt))
  end
  return ids
end
local ids, fair = false, false
if count > 0 then
  fair = redis.call('EXISTS', K.tr, K.tw) > 0  -- tenants have pending tasks (taking turns or held by their rate)
  if fair then
    ids = take_fair(count)
  else
    ids = take_plain(count)
  end
  if #ids == 0 then
    ids = false
  end
end
if ids or #runs > 0 then
  local expiry = string.format('%.0f', now + tonumber(A.lease_ms))  -- (a string once: not one number per task)
  local prefix = 'a' .. A.token
  local hset, zadd, h, o = {}, {}, 0, 3  -- (h, o: the lengths of hset/zadd and out)
  for i = 1, #runs, 2 do
    hset[h + 1], hset[h + 2] = runs[i], prefix .. runs[i + 1]
    zadd[h + 1], zadd[h + 2] = expiry, runs[i]
    out[o + 1], out[o + 2] = runs[i], runs[i + 1]
    h, o = h + 2, o + 2
  end
  ids = ids or {}
  local vals, need = {}, {}  -- (the values take_fair did not read: one HMGET)
  for i = 1, #ids do
    vals[i] = fair_vals[ids[i]]
    if not vals[i] then
      need[#need + 1] = ids[i]
    end
  end
  if #need > 0 then
    local got, j = redis.call('HMGET', K.tasks, unpack(need)), 0
    for i = 1, #ids do
      if not fair_vals[ids[i]] then
        j = j + 1
        vals[i] = got[j]
      end
    end
  end
  local held = {}
  for i = 1, #ids do
    local msg = stored_msg_if(vals[i], 'p')  -- (only pending tasks are leased)
    local score = msg and hold_score(holds, vals[i], version, K.conf)
    if score then  -- not for this worker: held (includes/hold)
      redis.call('HSET', K.tasks, ids[i], 's' .. msg)
      redis.call('ZADD', K.scheduled, string.format('%.0f', score), ids[i])
      held[#held + 1] = ids[i]
      msg = nil
    end
    if msg then
      local id = ids[i]
      hset[h + 1], hset[h + 2] = id, prefix .. msg
      zadd[h + 1], zadd[h + 2] = expiry, id
      out[o + 1], out[o + 2] = id, msg
      h, o = h + 2, o + 2
    end
  end
  held_any = held_any or #held > 0  -- (tasks without a tenant: a tenant's were held in take_fair, before they took a slot)
  if h > 0 then
    redis.call('HSET', K.tasks, unpack(hset))
    if redis.call('ZADD', K.lease, unpack(zadd)) < h / 2 then  -- (an id popped twice: leased once)
      local seen, kept = {}, {now, 0, 0}
      for i = 4, o, 2 do
        if not seen[out[i]] then
          seen[out[i]] = true
          local k = #kept
          kept[k + 1], kept[k + 2] = out[i], out[i + 1]
        end
      end
      out = kept
    end
    local cap = tonumber(conf[1]) or EVENTS_CAP
    events_conf(K.conf)  -- (the stream's count of events: includes/events)
    if cap > 0 and active_wanted(conf[10], conf[11], now) then  -- (one entry per type: includes/events)
      local groups, order = {}, {}
      for i = 4, #out, 2 do
        local mtype, id = msg_type(out[i + 1]), out[i]
        if ids_ok(id) then
          local g = groups[mtype]
          if not g then
            g = {}
            groups[mtype] = g
            order[#order + 1] = mtype
          end
          g[#g + 1] = id
        else
          emit(K.events, cap, 'e', 'active', 'id', id, 'type', mtype)
        end
      end
      for _, mtype in ipairs(order) do
        emit_ids(K.events, cap, groups[mtype], 'active', 'type', mtype)
      end
    end
  end
end
if held_any and wait < 0 then  -- the concurrency limit's slots held tasks took are free again: not held back by it
  wait = 0
end
local remaining = redis.call('LLEN', K.pending) + prios  -- (includes/priority pending_count, prio's size known)
local rate_wait = false  -- every tenant with work is held by its rate: ms until the first next token
if fair or count == 0 then  -- tenants' tasks count while a tenant is in the ring or held by its rate (not all paused)
  local ready = redis.call('ZRANGE', K.tr, 0, 1)  -- ('' at most once: 2 tell)
  local live = ready[1] ~= nil and (ready[1] ~= '' or ready[2] ~= nil)
  local first = not live and redis.call('ZRANGE', K.tw, 0, 0, 'WITHSCORES')[2]  -- (the first due of tw)
  if first then
    rate_wait = math.max(1, tonumber(first) - now)
  end
  if live or rate_wait then
    rate_wait = not live and remaining == 0 and rate_wait
    remaining = remaining + redis.call('ZCARD', K.tq)
  end
end
out[2] = remaining
local expected = false  -- another worker is the rate's waiter, expected for the next token
if bucket then  -- the bucket refilled up to now, less a token per task taken
  local left = tokens - (#out - 3) / 2
  local until_ms = tonumber(conf[8])
  local mine = conf[7] == A.name
  expected = until_ms ~= nil and until_ms > now and not mine
  if rate_held and remaining > 0 then
    if expected then  -- sleep on the wake list: the waiter comes for the next token
      local at = math.min(now + POLL_MAX,
        math.max(now + LIMIT_WAIT, until_ms, (tonumber(conf[9]) or 0) + POLL_STEP))
      wait = -(at - now)
      redis.call('HSET', K.conf, 'tokens', tostring(left), 'ts', now, 'polls', at)
    else  -- this worker is the waiter
      redis.call('HSET', K.conf, 'tokens', tostring(left), 'ts', now, 'waiter', A.name,
        'waiter_until', now + wait + RATE_GRACE)
    end
  elseif mine and until_ms ~= nil and until_ms > now then  -- the waiter took its tokens: its turn ends
    redis.call('HSET', K.conf, 'tokens', tostring(left), 'ts', now, 'waiter_until', 0)
  else
    redis.call('HSET', K.conf, 'tokens', tostring(left), 'ts', now)
  end
  expected = expected and left < 1  -- (a token left over: a woken worker may take it now)
end
if rate_wait and wait == 0 then  -- tenants' rates hold every task left: look again at the next token
  wait = rate_wait
end
if remaining > 0 then
  if wait ~= 0 then
    out[3] = wait
  elseif not expected then
    signal(K.wake)
  end
end
return out
