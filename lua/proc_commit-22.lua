--[[ proc_commit: active -> (done) or completed, for a batch of process inputs of one queue, each
writing what the processor decided for it, atomically with its completion: the process record, the
events appended, the timer, the response to the caller, the process's key released to its next
input. A worker commits every input that finished since its last write in one call (one script per
queue per batch, as done-16 acknowledges tasks); a batch of one is the single case. Each input is
checked and written on its own: one refused (its code says why) leaves the others to proceed, and
the script writes every input it accepts whole. Two inputs of one process are never in one batch
(the process's key lets one run at a time). Events: the 'completed' of the inputs and the
'enqueued' of the keys' next inputs are gathered, one entry per batch (includes/exit ``batch``);
'scheduled' and 'process_removed' are written in their place, after the earlier inputs' events.
KEYS[1] tasks          tasks hash
KEYS[2] lease          lease zset
KEYS[3] completed      completed zset: id -> expiry (ms)
KEYS[4] processed      lifetime processed counter
KEYS[5] processed_day  today's processed counter
KEYS[6] progress       progress hash (the inputs' entries are cleared)
KEYS[7] watch          watch hash: id -> inbox ids of late waiters
KEYS[8] events         the queue's event stream
KEYS[9] conf           the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[10] keyheld       keyheld hash: key -> the id holding it (includes/serial)
KEYS[11] blocked       blocked zset (tasks waiting behind their key)
KEYS[12] pending       pending list (a key's next input is made pending)
KEYS[13] prio          pending ids of priorities other than the default (includes/priority)
KEYS[14] wake          wake-up list idle workers block on
KEYS[15] proc          proc hash: process id -> record (includes/process)
KEYS[16] procs         procs zset: process id -> last change (ms)
KEYS[17] hist          hist hash: '<process id>:<n>' -> event
KEYS[18] scheduled     scheduled zset (the timer inputs wait there)
KEYS[19] tick          wake-up list forwarders block on (a timer due before the others)
KEYS[20] children      children hash (includes/flow): tasks waiting on an input are told
KEYS[21] outbox        the queue's outbox stream (includes/flow)
KEYS[22] deps          deps hash: an input's record as a workflow child, deleted with it
KEYS[23..] extra       the inboxes of waiting callers and the processes' keys' lists, named by
                       index j from ARGV: KEYS[22+j]
ARGV[1] day_ttl        seconds to keep a daily counter
ARGV[2] now            '' = Redis time; else a simulated time in ms
ARGV[3..] items  one group of 23 per input:
        id             the input's task id
        token          the lease token
        msg            the message rewritten with completed_at and result ('' = not kept: deleted)
        retention      ms to keep it (with msg)
        reply          index j of the waiting caller's inbox in KEYS[22+j], 0 = nobody waits
        payload        the outcome for the waiting caller (msgpack [id, 'c', response]), '' = none
        attempt        the attempt's number (for the event)
        pid            the process id
        kind           the input's kind (init, call, timeout, repair, remove), written with its events
        expect         the record as the worker read it ('<status>:<count>'); '' = the input ends
                       without touching the process (a skipped input: a stale timer, a second init;
                       a timer that fell due while the process was in error only clears the timer)
        state_mode     'k' = keep the state, 's' = set it to state
        state          the new state (msgpack, '' = None)
        new_events     the events to append (rec_pack of msgpack values)
        timer_mode     'k' = keep the timer, 'x' = cancel it, 's' = set it: in timer_ms ms, input
                       timer_id with message timer_msg
        timer_ms
        timer_id
        timer_msg
        remove         '1' = delete the process (record, history, timer) after this input
        key            the input's key ('proc:<process id>'), released to the next input
        keylist        index j of the key's list in KEYS[22+j]
        result         the response alone (msgpack, '' = None), for tasks waiting on this input
        keep           the process type's max_events: after the append, events older than the last
                       ``keep`` are deleted (the record's first moves on); 0 = keep them all
        progressed     1 = the run wrote progress (its entry is cleared), 0 = it did not
Returns one code per input, in order: 1 = written (or a string: written, and the inbox ids of late
waiters to notify, with the token '!' if tasks waiting on it were told: includes/flow), 0 = no such
task, -3 = lease not held (write refused), -8 = the process changed since it was read (nothing
written: the lease expires and the input runs again from the process as it is).
]]
--- @include "now"
--- @include "active"
--- @include "process"
--- @include "exit"
local W = 23
local INBOX_TTL_MS = 600000
local n = (#ARGV - 2) / W
local now = now_ms(ARGV[2])
local x = {t = KEYS[1], lease = KEYS[2], progress = KEYS[6], events = KEYS[8], conf = KEYS[9], children = KEYS[20],
           outbox = KEYS[21], keyheld = KEYS[10], blocked = KEYS[11], pending = KEYS[12], prio = KEYS[13],
           wake = KEYS[14], deps = KEYS[22], batch = {},  -- (the events: one entry per batch, exit_flush)
           flows = redis.call('EXISTS', KEYS[20], KEYS[22]) > 0}  -- a queue with workflows? (one command per batch)
local e = {how = 'done', id = '', msg = '', attempt = '', result = '', progressed = false, key = '', keylist = false}
  -- (one per batch, refilled for each input)
local out, ok, okpos = {}, {}, {}
for i = 1, n do
  local b = 3 + (i - 1) * W
  local id, pid, expect = ARGV[b], ARGV[b + 7], ARGV[b + 9]
  local m, code = claim_active(KEYS[1], KEYS[2], id, ARGV[b + 1], 0, false)
  local r
  if code == 1 then
    local raw = redis.call('HGET', KEYS[15], pid)
    r = raw and rec_unpack(raw)
    if expect ~= '' and (not r or r[R_STATUS] .. ':' .. r[R_N] ~= expect) then
      code = -8
    end
  end
  out[i] = code
  if code == 1 then
    ok[#ok + 1], okpos[#okpos + 1] = id, i
    -- the input ends (first: the removals, so a full Redis cannot stop the commit half-way)
    redis.call('ZREM', KEYS[2], id)
    if ARGV[b + 2] ~= '' then
      redis.call('ZADD', KEYS[3], now + tonumber(ARGV[b + 3]), id)
      redis.call('HSET', KEYS[1], id, 'c' .. ARGV[b + 2])
    else
      redis.call('HDEL', KEYS[1], id)
    end
    if expect ~= '' then
      if ARGV[b + 17] == '1' then
        proc_cancel_timer(KEYS[1], KEYS[18], KEYS[11], r[R_TIMER], id)
        proc_drop_history(KEYS[17], pid, proc_first(r), tonumber(r[R_N]))
        redis.call('HDEL', KEYS[15], pid)
        redis.call('ZREM', KEYS[16], pid)
        exit_flush(x)  -- (the earlier inputs' events first)
        emit(KEYS[8], exit_cap(x), 'e', 'process_removed', 'process', pid, 'id', id)
      else
        local c = tonumber(r[R_N])
        for _, data in ipairs(rec_unpack(ARGV[b + 12])) do
          c = c + 1
          redis.call('HSET', KEYS[17], pid .. ':' .. c, rec_pack({tostring(now), id, ARGV[b + 8], data}))
        end
        r[R_N] = tostring(c)
        local keep, first = tonumber(ARGV[b + 21]), proc_first(r)
        if keep > 0 and c - keep >= first then
          proc_drop_history(KEYS[17], pid, first, c - keep)
          r[R_FIRST] = tostring(c - keep + 1)
        end
        r[R_STATUS], r[R_BROKEN], r[R_ERROR], r[R_UPDATED] = 'running', '', '', tostring(now)
        if ARGV[b + 10] == 's' then
          r[R_STATE] = ARGV[b + 11]
        end
        local tmode = ARGV[b + 13]
        if tmode ~= 'k' or r[R_TIMER] == id then  -- a timer that fired is spent
          proc_cancel_timer(KEYS[1], KEYS[18], KEYS[11], r[R_TIMER], id)
          r[R_TIMER], r[R_DUE] = '', ''
        end
        if tmode == 's' then
          local due, tid, tmsg = now + tonumber(ARGV[b + 14]), ARGV[b + 15], ARGV[b + 16]
          redis.call('HSET', KEYS[1], tid, 's' .. tmsg)
          signal_if_first(KEYS[18], due, KEYS[19])
          redis.call('ZADD', KEYS[18], due, tid)
          exit_flush(x)  -- (the earlier inputs' events first)
          emit(KEYS[8], exit_cap(x), 'e', 'scheduled', 'id', tid, 'type', msg_type(tmsg), 'due', due)
          r[R_TIMER], r[R_DUE] = tid, tostring(due)
        end
        redis.call('HSET', KEYS[15], pid, rec_pack(r))
        redis.call('ZADD', KEYS[16], now, pid)
      end
    elseif r and r[R_TIMER] == id then
      -- a skipped input that is the process's timer (it fell due while the process was in error): the
      -- timer is spent, so the record no longer names it (the repair's processor may set a new one)
      r[R_TIMER], r[R_DUE] = '', ''
      redis.call('HSET', KEYS[15], pid, rec_pack(r))
    end
    local reply = tonumber(ARGV[b + 4])
    if reply > 0 and ARGV[b + 5] ~= '' then
      redis.call('RPUSH', KEYS[22 + reply], ARGV[b + 5])
      redis.call('PEXPIRE', KEYS[22 + reply], INBOX_TTL_MS)
    end
    -- what every end owes (includes/exit): progress, the event, the tasks waiting on it told, its key
    -- (the process's, released once the record is written); an input is never unique
    local keylist = tonumber(ARGV[b + 19])
    e.how, e.id, e.msg, e.attempt, e.result = ARGV[b + 2] ~= '' and 'completed' or 'done', id, m, ARGV[b + 6],
      ARGV[b + 20]
    e.key, e.keylist = ARGV[b + 18], keylist > 0 and KEYS[22 + keylist] or false
    e.progressed = ARGV[b + 22] == '1'
    if task_exit(x, e) then
      out[i] = '!'
    end
  end
end
exit_flush(x)
if #ok == 0 then
  return out
end
redis.call('INCRBY', KEYS[4], #ok)
if redis.call('INCRBY', KEYS[5], #ok) == #ok then
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[1]))
end
local late = redis.call('HMGET', KEYS[7], unpack(ok))
local gone = {}
for k, i in ipairs(okpos) do
  if late[k] then
    out[i] = out[i] == '!' and late[k] .. ' !' or late[k]
    gone[#gone + 1] = ok[k]
  end
end
if #gone > 0 then
  redis.call('HDEL', KEYS[7], unpack(gone))
end
return out
