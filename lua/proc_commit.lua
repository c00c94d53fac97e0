--[[ proc_commit: active -> (done) or completed, for a batch of process inputs of one queue, each
writing what the processor decided for it, atomically with its completion: the process record, the
events appended, the timer, the response to the caller, the process's key released to its next
input. A worker commits every input that finished since its last write in one call (one script per
queue per batch, as done.lua acknowledges tasks); a batch of one is the single case. Each input is
checked and written on its own: one refused (its code says why) leaves the others to proceed, and
the script writes every input it accepts whole. Two inputs of one process are never in one batch
(the process's key lets one run at a time). Events: the 'completed' of the inputs and the
'enqueued' of the keys' next inputs are gathered, one entry per batch (includes/exit ``batch``);
'scheduled' and 'process_removed' are written in their place, after the earlier inputs' events.
KEY tasks              tasks hash
KEY lease              lease zset
KEY completed          completed zset: id -> expiry (ms)
KEY processed          lifetime processed counter
KEY processed_day      today's processed counter
KEY progress           progress hash (the inputs' entries are cleared)
KEY watch              watch hash: id -> inbox ids of late waiters
KEY pwatch             pwatch hash: process id -> inbox ids of clients waiting for the run (proc_watch)
KEY @exit
KEY proc               proc hash: process id -> record (includes/process)
KEY procs              procs zset: process id -> last change (ms)
KEY hist               hist hash: '<process id>:<n>' -> event
KEY scheduled          scheduled zset (the timer inputs wait there)
KEY tick               wake-up list forwarders block on (a timer due before the others)
KEY deps               deps hash: an input's record as a workflow child, deleted with it
KEY extra...           the inboxes of waiting callers and the processes' keys' lists, named by
                       index j from ARGV: K.extra[j]
ARG day_ttl            seconds to keep a daily counter
ARG now                '' = Redis time; else a simulated time in ms
ARG items... {id token msg retention reply payload attempt pid kind expect op rec_a rec_due rec_b rec_c
               new_events drop_from drop_to cancel timer_at timer_id timer_msg key keylist result
               progressed}  one item per input:
        id             the input's task id
        token          the lease token
        msg            the message rewritten with completed_at and result ('' = not kept: deleted)
        retention      ms to keep it (with msg)
        reply          index j of the waiting caller's inbox in K.extra[j], 0 = nobody waits
        payload        the outcome for the waiting caller (msgpack [id, 'c', response]), '' = none
        attempt        the attempt's number (for the event)
        pid            the process id
        kind           the input's kind (init, call, timeout, repair, remove)
        expect         the record as the worker read it (its stored bytes; the input is refused if the
                       record is not those bytes now); '' = the input ends without touching the
                       process (a skipped input: a stale timer, a second init; a timer that fell due
                       while the process was in error only clears the timer)
        op             'w' = write the step, 'r' = delete the process (record, history, timer)
        rec_a          the new record (core/processes/model.py step_args: built by the worker from the one it
                       read and the step), as rec_pack of its items before 'due' ...
        rec_due        ... its 'due' item ('' = the timer this input sets: timer_at) ...
        rec_b          ... its 'created' item; then 'updated' (now, written here) and ...
        rec_c          ... its items after 'updated'
        new_events     the events to append: rec_pack of (hist field, entry but its time) pairs
                       (each written as rec_pack{at = now, input id, kind, data})
        drop_from      the history's events drop_from .. drop_to are deleted (max_events; the
        drop_to        whole history of a removed process); drop_to < drop_from = none
        cancel         the pending timer input this step replaces or cancels ('' = none): deleted
                       if it has not started (includes/process proc_cancel_timer)
        timer_at       the timer this input sets (timer_id '' = none): input timer_id, due at
        timer_id       timer_at (ms on Redis's clock; a time past is due at once), with message timer_msg
        timer_msg
        key            the input's key ('proc:<process id>'), released to the next input
        keylist        index j of the key's list in K.extra[j]
        result         the response alone (msgpack, '' = None), for tasks waiting on this input
        progressed     1 = the run wrote progress (its entry is cleared), 0 = it did not
Returns one code per input, in order: 1 = written (or a string: written, and the inbox ids of late
waiters to notify, with the token '!' if tasks waiting on it were told: includes/flow, and '@' + the
inbox id of each client waiting for its process, proc_watch: the worker wakes it), 0 = no such
task, -3 = lease not held (write refused), -8 = the process changed since it was read (nothing
written: the lease expires and the input runs again from the process as it is).
]]
--- @include "now"
--- @include "active"
--- @include "process"
--- @include "exit"
local INBOX_TTL_MS = 600000
local n = A.items.n
local now = now_ms(A.now)
local nows = tostring(now)
local at = #nows .. ':' .. nows  -- (the item of 'now' in a record or an entry)
local x = {t = K.tasks, lease = K.lease, progress = K.progress, events = K.events, conf = K.conf, children = K.children,
           outbox = K.outbox, keyheld = K.keyheld, blocked = K.blocked, pending = K.pending, prio = K.prio,
           wake = K.wake, deps = K.deps, tq = K.tq, tr = K.tr, tn = K.tn, ta = K.ta,
           batch = {},  -- (the events: one entry per batch, exit_flush)
           flows = redis.call('EXISTS', K.children, K.deps) > 0}  -- a queue with workflows? (one command per batch)
local e = {how = 'done', id = '', msg = '', attempt = '', result = '', progressed = false, key = '', keylist = false}
  -- (one per batch, refilled for each input)
local out, ok, okpos, pids = {}, {}, {}, {}  -- (pids: of the inputs written, for their waiters)
for i = 1, n do
  local it = A.items[i]
  local id, pid, expect = it.id, it.pid, it.expect
  local m, code = claim_active(K.tasks, K.lease, id, it.token, 0, false)
  if code == 1 and expect ~= '' and redis.call('HGET', K.proc, pid) ~= expect then
    code = -8
  end
  out[i] = code
  if code == 1 then
    ok[#ok + 1], okpos[#okpos + 1], pids[#pids + 1] = id, i, pid
    -- the input ends (first: the removals, so a full Redis cannot stop the commit half-way)
    redis.call('ZREM', K.lease, id)
    if it.msg ~= '' then
      redis.call('ZADD', K.completed, now + tonumber(it.retention), id)
      redis.call('HSET', K.tasks, id, 'c' .. it.msg)
    else
      redis.call('HDEL', K.tasks, id)
    end
    if expect ~= '' then
      if it.op == 'w' and it.new_events ~= '' then
        local fv = rec_unpack(it.new_events)
        for j = 2, #fv, 2 do
          fv[j] = at .. fv[j]
        end
        for j = 1, #fv, 1000 do  -- (in chunks: Lua's unpack has a stack limit)
          redis.call('HSET', K.hist, unpack(fv, j, math.min(#fv, j + 999)))
        end
      end
      local from, to = tonumber(it.drop_from), tonumber(it.drop_to)
      if to >= from then
        proc_drop_history(K.hist, pid, from, to)
      end
      proc_cancel_timer(K.tasks, K.scheduled, K.blocked, it.cancel, id)
      if it.op == 'r' then
        redis.call('HDEL', K.proc, pid)
        redis.call('ZREM', K.procs, pid)
        exit_flush(x)  -- (the earlier inputs' events first)
        emit(K.events, exit_cap(x), 'e', 'process_removed', 'process', pid, 'id', id)
      else
        local due, tid = it.rec_due, it.timer_id
        if tid ~= '' then
          local tmsg = it.timer_msg
          local when = tonumber(it.timer_at)
          redis.call('HSET', K.tasks, tid, 's' .. tmsg)
          signal_if_first(K.scheduled, when, K.tick)
          redis.call('ZADD', K.scheduled, when, tid)
          exit_flush(x)  -- (the earlier inputs' events first)
          emit(K.events, exit_cap(x), 'e', 'scheduled', 'id', tid, 'type', msg_type(tmsg), 'due', when)
          due = tostring(when)
          due = #due .. ':' .. due
        end
        redis.call('HSET', K.proc, pid, it.rec_a .. due .. it.rec_b .. at .. it.rec_c)
        redis.call('ZADD', K.procs, now, pid)
      end
    elseif it.kind == 'timeout' then
      -- a skipped input that is the process's timer (it fell due while the process was in error): the
      -- timer is spent, so the record no longer names it (the repair's processor may set a new one)
      local raw = redis.call('HGET', K.proc, pid)
      local r = raw and rec_unpack(raw)
      if r and r[R_TIMER] == id then
        r[R_TIMER], r[R_DUE] = '', ''
        redis.call('HSET', K.proc, pid, rec_pack(r))
      end
    end
    local reply = tonumber(it.reply)
    if reply > 0 and it.payload ~= '' then
      redis.call('RPUSH', K.extra[reply], it.payload)
      redis.call('PEXPIRE', K.extra[reply], INBOX_TTL_MS)
    end
    -- what every end owes (includes/exit): progress, the event, the tasks waiting on it told, its key
    -- (the process's, released once the record is written); an input is never unique
    local keylist = tonumber(it.keylist)
    e.how, e.id, e.msg, e.attempt, e.result = it.msg ~= '' and 'completed' or 'done', id, m, it.attempt,
      it.result
    e.key, e.keylist = it.key, keylist > 0 and K.extra[keylist] or false
    e.progressed = it.progressed == '1'
    if task_exit(x, e) then
      out[i] = '!'
    end
  end
end
exit_flush(x)
if #ok == 0 then
  return out
end
redis.call('INCRBY', K.processed, #ok)
if redis.call('INCRBY', K.processed_day, #ok) == #ok then
  redis.call('EXPIRE', K.processed_day, tonumber(A.day_ttl))
end
local late = redis.call('HMGET', K.watch, unpack(ok))
local gone = {}
for k, i in ipairs(okpos) do
  if late[k] then
    out[i] = out[i] == '!' and late[k] .. ' !' or late[k]
    gone[#gone + 1] = ok[k]
  end
end
if #gone > 0 then
  redis.call('HDEL', K.watch, unpack(gone))
end
local waiting = redis.call('HMGET', K.pwatch, unpack(pids))
local waited = {}  -- (the processes whose waiters are answered)
for k, i in ipairs(okpos) do
  if waiting[k] then
    local marks = (string.gsub(waiting[k], '(%S+)', '@%1'))
    out[i] = type(out[i]) == 'string' and out[i] .. ' ' .. marks or marks
    waited[#waited + 1] = pids[k]
  end
end
if #waited > 0 then
  redis.call('HDEL', K.pwatch, unpack(waited))
end
return out
