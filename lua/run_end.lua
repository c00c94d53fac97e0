--[[ run_end: a run of a targeted task ends (run task active -> deleted; the task: targeted ->
targeted, completed, archived or deleted); or an operator deletes or archives a targeted task
A run task ('<task id>|<worker name>', includes/runs) ended: it is deleted and its worker's
entry in the task's record set: s succeeded, f failed, e lease expired (the recoverer), or,
g = given back (the worker stopped, or was rate limited, before the run did anything): the entry
is dropped, so the worker may take a run of the task again later. Failed and expired runs count
as the task's failures. When `runs` workers have succeeded the task completes; when its failures
exceed max_retry it is archived. Either way (and for the operator's D delete and X archive) it
leaves the targeted zset, its index zsets and the runs hash, and its lock is released; a task
kept (completed with retention, archived) keeps its final runs record in ``kept``, with the
results of its succeeded runs (retention only). A run task ending after its task is gone
(deleted, archived, completed) is just deleted, and so is one whose worker's entry in the record
is not 'running' (a new task stored under the same id since: the run belongs to the task that was
deleted, and is not credited to the new one).
KEY tasks              tasks hash
KEY lease              lease zset
KEY targeted           targeted tasks zset (id -> when enqueued)
KEY runs               runs hash: task id -> record (includes/runs)
KEY archived           archived zset
KEY completed          completed zset
KEY @events
KEY progress           progress hash (the run's progress is cleared)
KEY processed          lifetime processed counter
KEY processed_day       today's processed counter
KEY failed             lifetime failed counter
KEY failed_day         today's failed counter
KEY lock               the task's uniqueness lock (the queue's placeholder when not unique)
KEY wake               the queue's wake-up list (a freed run of a task any worker may run)
KEY kept               what is kept of the task's runs ('ran:<task id>', a hash): field 'r:<name>'
                       = the result of worker <name>'s succeeded run (tasks with retention only),
                       and, once the task completes with retention (kept that long) or is
                       archived (`archived_ttl` ms), field '' = its final record; deleted otherwise
KEY @pending
KEY targets...         targets[1..k]: the task's index zsets ('m:*', or 'm:w:<name>' per allowed
                       worker); then targets[k+1..]: the allowed workers' own wake lists (a freed
                       run wakes one of them); for a task any worker may run, the own wake list
                       of the worker whose run's lease expired (outcome e: that worker, a process
                       restarted under its name, may take the run again), or none
ARG run                the run task's id; '' = the operator acts on the task (`outcome`: D or X)
ARG token              the run's lease token (the worker's, or the one read with the expired lease)
ARG outcome            s f e g (a run), D X (the operator)
ARG task               the targeted task's id
ARG recover            '1' = the recoverer: the run's lease must have expired
ARG now                '' = Redis time; else a simulated time in ms
ARG done               the task's message when completed with retention ('' = delete it then);
                       its result is the result of the run that completes it
ARG retention          ms to keep it completed
ARG failed_msg         the task's message with this run's error ('' = keep the stored one)
ARG max_retry          failures allowed before the task is archived
ARG k                  how many index zsets follow the fixed keys
ARG day_ttl            seconds to keep a daily counter
ARG archived_ttl       ms to keep an archived task's runs record (and the longest its run results
                       wait for the task to finish)
ARG result             a succeeded run's encoded result, kept in ``kept`` ('' = none: no retention)
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
operator_only(K.tasks)  -- workers and operators only: a producer is refused here, before any write
local run, outcome, tid = A.run, A.outcome, A.task
local now = now_ms(A.now)
local day_ttl = tonumber(A.day_ttl)
local cap = events_cap(K.conf)
local name = nil
-- a targeted task has no key and is never a parent; its runs are the active tasks (progress, lease)
-- (the queue's keys of the slot duty: a run held a concurrency slot like any active task, and the
-- exit include wakes a worker the limit held back once it is free)
local x = {t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, cap = cap, conf = K.conf,
           pending = K.pending, prio = K.prio, wake = K.wake,
           tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta}
if run ~= '' then
  local _, code = claim_active(K.tasks, K.lease, run, A.token, now, A.recover == '1')
  if code ~= 1 then
    return {code, ''}
  end
  _, name = run_parts(run)
  redis.call('ZREM', K.lease, run)  -- first write: a removal (a full Redis still lets a run end)
  redis.call('HDEL', K.tasks, run)
  task_exit(x, {id = run, how = 'run_ended'})
  if outcome == 's' then
    bump(K.processed, K.processed_day, day_ttl)
  elseif outcome == 'f' or outcome == 'e' then
    bump(K.processed, K.processed_day, day_ttl)
    bump(K.failed, K.failed_day, day_ttl)
  end
end
local tv = redis.call('HGET', K.tasks, tid)
local rec = redis.call('HGET', K.runs, tid)
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
  if outcome == 's' and A.result ~= '' then
    redis.call('HSET', K.kept, 'r:' .. name, A.result)
    redis.call('EXPIRE', K.kept, math.max(1, math.ceil(tonumber(A.archived_ttl) / 1000)))
  end
  if outcome == 'f' or outcome == 'e' then
    r.failures = r.failures + 1
  end
  emit(K.events, cap, 'e', 'run', 'id', tid, 'worker', name, 'outcome', outcome)
end
local k = tonumber(A.k)
local finish = nil
if outcome == 'D' or outcome == 'X' then
  finish = outcome
elseif rec_count(r, 's') >= r.n then
  finish = 'c'
elseif (outcome == 'f' or outcome == 'e') and r.failures > tonumber(A.max_retry) then
  finish = 'x'
end
if finish then
  redis.call('ZREM', K.targeted, tid)
  for i = 1, k do
    redis.call('ZREM', K.targets[i], tid)
  end
  redis.call('HDEL', K.runs, tid)
  -- the final runs record (who ran it, how, the failures) stays with a kept task, as long as it
  -- (EXPIRE in seconds, rounded up: the roles' ACLs allow EXPIRE)
  if finish == 'c' and A.done ~= '' then
    redis.call('HSET', K.kept, '', rec_build(r))
    redis.call('EXPIRE', K.kept, math.max(1, math.ceil(tonumber(A.retention) / 1000)))
  elseif finish == 'x' or finish == 'X' then
    redis.call('HSET', K.kept, '', rec_build(r))
    redis.call('EXPIRE', K.kept, math.max(1, math.ceil(tonumber(A.archived_ttl) / 1000)))
  else
    redis.call('DEL', K.kept)
  end
  local msg = stored_msg(tv)
  local ended = {id = tid, msg = msg, lock = K.lock, progressed = false}
  if finish == 'c' then
    if A.done == '' then
      redis.call('HDEL', K.tasks, tid)
      ended.how = 'done'
    else
      redis.call('HSET', K.tasks, tid, 'c' .. A.done)
      redis.call('ZADD', K.completed, now + tonumber(A.retention), tid)
      ended.how = 'completed'
    end
    task_exit(x, ended)
    return {1, A.done == '' and 'd' or 'c'}
  elseif finish == 'D' then
    redis.call('HDEL', K.tasks, tid)
    ended.how = 'deleted'
    task_exit(x, ended)
    return {1, 'd'}
  end
  redis.call('HSET', K.tasks, tid, 'x' .. (A.failed_msg ~= '' and A.failed_msg or msg))
  redis.call('ZADD', K.archived, now, tid)
  ended.how = 'archived'
  ended.error = finish == 'X' and 'archived by an operator' or 'too many failed runs'
  task_exit(x, ended)
  return {1, 'x'}
end
redis.call('HSET', K.runs, tid, rec_build(r))
if A.failed_msg ~= '' then
  redis.call('HSET', K.tasks, tid, 'm' .. A.failed_msg)
end
if outcome ~= 's' then  -- a run is free again: wake a worker that may take it
  if r.allowed == '*' then
    signal(K.wake)
  end
  for i = k + 1, K.targets.n do  -- (the allowed workers'; or the expired run's worker's: issue 42 #9)
    signal(K.targets[i])
  end
end
return {1, 'm'}
