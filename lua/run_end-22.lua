--[[ run_end: a run of a targeted task ends (run task active -> deleted; the task: targeted ->
targeted, completed, archived or deleted); or an operator deletes or archives a targeted task
A run task ('<task id>|<worker name>', includes/runs) ended: it is deleted and its worker's
entry in the task's record set: s succeeded, f failed, e lease expired (the recoverer), or,
g = given back (the worker stopped, or was rate limited, before the run did anything): the entry
is dropped, so the worker may take a run of the task again later. Failed and expired runs count
as the task's failures. When `runs` workers have succeeded the task completes; when its failures
exceed max_retry it is archived. Either way (and for the operator's D delete and X archive) it
leaves the targeted zset, its index zsets and the runs hash, and its lock is released; a task
kept (completed with retention, archived) keeps its final runs record in KEYS[16], with the
results of its succeeded runs (retention only). A run task ending after its task is gone
(deleted, archived, completed) is just deleted, and so is one whose worker's entry in the record
is not 'running' (a new task stored under the same id since: the run belongs to the task that was
deleted, and is not credited to the new one).
KEYS[1] tasks          tasks hash
KEYS[2] lease          lease zset
KEYS[3] targeted       targeted tasks zset (id -> when enqueued)
KEYS[4] runs           runs hash: task id -> record (includes/runs)
KEYS[5] archived       archived zset
KEYS[6] completed      completed zset
KEYS[7] events         the queue's event stream
KEYS[8] conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[9] progress       progress hash (the run's progress is cleared)
KEYS[10] processed     lifetime processed counter
KEYS[11] processed_day  today's processed counter
KEYS[12] failed        lifetime failed counter
KEYS[13] failed_day    today's failed counter
KEYS[14] lock          the task's uniqueness lock (the queue's placeholder when not unique)
KEYS[15] wake          the queue's wake-up list (a freed run of a task any worker may run)
KEYS[16] kept          what is kept of the task's runs ('ran:<task id>', a hash): field 'r:<name>'
                       = the result of worker <name>'s succeeded run (tasks with retention only),
                       and, once the task completes with retention (kept that long) or is
                       archived (ARGV[13] ms), field '' = its final record; deleted otherwise
KEYS[17] pending       pending list (with prio: whether tasks wait for a freed concurrency slot)
KEYS[18] prio          priority zset
KEYS[19] tq  the queue's tenant zset: pending tasks that have a tenant (includes/priority)
KEYS[20] tr  the queue's ready ring of tenants: tenant -> pass (includes/priority)
KEYS[21] tn  the queue's tenant hash: 'v' the virtual time, 'q' the seq counter
KEYS[22] ta  the queue's active tenant tasks: hash id -> tenant (a tenant's concurrency; includes/priority)
KEYS[23..] targets     KEYS[23..22+k]: the task's index zsets ('m:*', or 'm:w:<name>' per allowed
                       worker); then KEYS[23+k..]: the allowed workers' own wake lists (a freed
                       run wakes one of them); for a task any worker may run, the own wake list
                       of the worker whose run's lease expired (outcome e: that worker, a process
                       restarted under its name, may take the run again), or none
ARGV[1] run            the run task's id; '' = the operator acts on the task (ARGV[3] D or X)
ARGV[2] token          the run's lease token (the worker's, or the one read with the expired lease)
ARGV[3] outcome        s f e g (a run), D X (the operator)
ARGV[4] task           the targeted task's id
ARGV[5] recover        '1' = the recoverer: the run's lease must have expired
ARGV[6] now            '' = Redis time; else a simulated time in ms
ARGV[7] done           the task's message when completed with retention ('' = delete it then);
                       its result is the result of the run that completes it
ARGV[8] retention      ms to keep it completed
ARGV[9] failed_msg     the task's message with this run's error ('' = keep the stored one)
ARGV[10] max_retry     failures allowed before the task is archived
ARGV[11] k             how many index zsets follow the fixed keys
ARGV[12] day_ttl       seconds to keep a daily counter
ARGV[13] archived_ttl  ms to keep an archived task's runs record (and the longest its run results
                       wait for the task to finish)
ARGV[14] result        a succeeded run's encoded result, kept in KEYS[16] ('' = none: no retention)
Returns {code, state}: code 1 = done, 0 = no such run (or task, for the operator), -3 = the
run's lease is not held, -4 = (recoverer) lease still alive; state = the task's state after
('m', 'c', 'x', 'd' deleted, or '' when the task was already gone).
]]
--- @include "now"
--- @include "active"
--- @include "signal"
--- @include "counters"
--- @include "runs"
--- @include "stored"
--- @include "exit"
--- @include "operator"
operator_only(KEYS[1])  -- workers and operators only: a producer is refused here, before any write
local run, outcome, tid = ARGV[1], ARGV[3], ARGV[4]
local now = now_ms(ARGV[6])
local day_ttl = tonumber(ARGV[12])
local cap = events_cap(KEYS[8])
local name = nil
-- a targeted task has no key and is never a parent; its runs are the active tasks (progress, lease)
-- (the queue's keys of the slot duty: a run held a concurrency slot like any active task, and the
-- exit include wakes a worker the limit held back once it is free)
local x = {t = KEYS[1], lease = KEYS[2], progress = KEYS[9], events = KEYS[7], cap = cap, conf = KEYS[8],
           pending = KEYS[17], prio = KEYS[18], wake = KEYS[15],
           tq = KEYS[19], tr = KEYS[20], tn = KEYS[21], ta = KEYS[22]}
if run ~= '' then
  local _, code = claim_active(KEYS[1], KEYS[2], run, ARGV[2], now, ARGV[5] == '1')
  if code ~= 1 then
    return {code, ''}
  end
  _, name = run_parts(run)
  redis.call('ZREM', KEYS[2], run)  -- first write: a removal (a full Redis still lets a run end)
  redis.call('HDEL', KEYS[1], run)
  task_exit(x, {id = run, how = 'run_ended'})
  if outcome == 's' then
    bump(KEYS[10], KEYS[11], day_ttl)
  elseif outcome == 'f' or outcome == 'e' then
    bump(KEYS[10], KEYS[11], day_ttl)
    bump(KEYS[12], KEYS[13], day_ttl)
  end
end
local tv = redis.call('HGET', KEYS[1], tid)
local rec = redis.call('HGET', KEYS[4], tid)
if stored_state(tv) ~= 'm' or not rec then
  return {run ~= '' and 1 or 0, ''}
end
local r = rec_parse(rec)
if name and (not r.states[name] or r.states[name][1] ~= 'r') then
  -- not this task's run: the task it ran for was deleted and a new one stored under its id (the
  -- run's worker is not running it: the run belongs to another incarnation); it changes nothing
  return {1, ''}
end
if name then
  if outcome == 'g' then
    r.states[name] = nil
  else
    if not r.states[name] then
      r.order[#r.order + 1] = name
    end
    r.states[name] = {outcome, tostring(now)}
  end
  if outcome == 's' and ARGV[14] ~= '' then
    redis.call('HSET', KEYS[16], 'r:' .. name, ARGV[14])
    redis.call('EXPIRE', KEYS[16], math.max(1, math.ceil(tonumber(ARGV[13]) / 1000)))
  end
  if outcome == 'f' or outcome == 'e' then
    r.failures = r.failures + 1
  end
  emit(KEYS[7], cap, 'e', 'run', 'id', tid, 'worker', name, 'outcome', outcome)
end
local k = tonumber(ARGV[11])
local finish = nil
if outcome == 'D' or outcome == 'X' then
  finish = outcome
elseif rec_count(r, 's') >= r.n then
  finish = 'c'
elseif (outcome == 'f' or outcome == 'e') and r.failures > tonumber(ARGV[10]) then
  finish = 'x'
end
if finish then
  redis.call('ZREM', KEYS[3], tid)
  for i = 23, 22 + k do
    redis.call('ZREM', KEYS[i], tid)
  end
  redis.call('HDEL', KEYS[4], tid)
  -- the final runs record (who ran it, how, the failures) stays with a kept task, as long as it
  -- (EXPIRE in seconds, rounded up: the roles' ACLs allow EXPIRE)
  if finish == 'c' and ARGV[7] ~= '' then
    redis.call('HSET', KEYS[16], '', rec_build(r))
    redis.call('EXPIRE', KEYS[16], math.max(1, math.ceil(tonumber(ARGV[8]) / 1000)))
  elseif finish == 'x' or finish == 'X' then
    redis.call('HSET', KEYS[16], '', rec_build(r))
    redis.call('EXPIRE', KEYS[16], math.max(1, math.ceil(tonumber(ARGV[13]) / 1000)))
  else
    redis.call('DEL', KEYS[16])
  end
  local msg = stored_msg(tv)
  local ended = {id = tid, msg = msg, lock = KEYS[14], progressed = false}
  if finish == 'c' then
    if ARGV[7] == '' then
      redis.call('HDEL', KEYS[1], tid)
      ended.how = 'done'
    else
      redis.call('HSET', KEYS[1], tid, 'c' .. ARGV[7])
      redis.call('ZADD', KEYS[6], now + tonumber(ARGV[8]), tid)
      ended.how = 'completed'
    end
    task_exit(x, ended)
    return {1, ARGV[7] == '' and 'd' or 'c'}
  elseif finish == 'D' then
    redis.call('HDEL', KEYS[1], tid)
    ended.how = 'deleted'
    task_exit(x, ended)
    return {1, 'd'}
  end
  redis.call('HSET', KEYS[1], tid, 'x' .. (ARGV[9] ~= '' and ARGV[9] or msg))
  redis.call('ZADD', KEYS[5], now, tid)
  ended.how = 'archived'
  ended.error = finish == 'X' and 'archived by an operator' or 'too many failed runs'
  task_exit(x, ended)
  return {1, 'x'}
end
redis.call('HSET', KEYS[4], tid, rec_build(r))
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], tid, 'm' .. ARGV[9])
end
if outcome ~= 's' then  -- a run is free again: wake a worker that may take it
  if r.allowed == '*' then
    signal(KEYS[15])
  end
  for i = 23 + k, #KEYS do  -- (the allowed workers'; or the expired run's worker's: issue 42 #9)
    signal(KEYS[i])
  end
end
return {1, 'm'}
