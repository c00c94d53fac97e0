--[[ proc_commit: active -> (done) or completed, writing what the processor decided for the input,
atomically with its completion: the process record, the events appended, the timer, the response
to the caller, the process's key released to its next input
KEYS[1] tasks          tasks hash
KEYS[2] lease          lease zset
KEYS[3] completed      completed zset: id -> expiry (ms)
KEYS[4] processed      lifetime processed counter
KEYS[5] processed_day  today's processed counter
KEYS[6] progress       progress hash (the task's entry is cleared)
KEYS[7] watch          watch hash: id -> inbox ids of late waiters
KEYS[8] reply          the inbox of the caller waiting through call_process (the watch hash when none)
KEYS[9] events         the queue's event stream
KEYS[10] conf          the queue's settings hash (field 'events': the stream's cap, 0 = off)
KEYS[11] keyheld       keyheld hash: key -> the id holding it (includes/serial)
KEYS[12] blocked       blocked zset (tasks waiting behind their key)
KEYS[13] pending       pending list (the key's next input is made pending)
KEYS[14] prio          pending ids of priorities other than the default (includes/priority)
KEYS[15] wake          wake-up list idle workers block on
KEYS[16] keylist       the process's key's list
KEYS[17] proc          proc hash: process id -> record (includes/process)
KEYS[18] procs         procs zset: process id -> last change (ms)
KEYS[19] hist          hist hash: '<process id>:<n>' -> event
KEYS[20] scheduled     scheduled zset (the timer input waits there)
KEYS[21] tick          wake-up list forwarders block on (a timer due before the others)
KEYS[22] children      children hash (includes/flow): tasks waiting on this input are told
KEYS[23] outbox        the queue's outbox stream (includes/flow)
ARGV[1] id             the input's task id
ARGV[2] token          the lease token
ARGV[3] msg            the message rewritten with completed_at and result ('' = not kept: deleted)
ARGV[4] retention      ms to keep it (with msg)
ARGV[5] day_ttl        seconds to keep a daily counter
ARGV[6] now            '' = Redis time; else a simulated time in ms
ARGV[7] payload        the outcome for the waiting caller (msgpack [id, 'c', response]), '' = none
ARGV[8] attempt        the attempt's number (for the event)
ARGV[9] pid            the process id
ARGV[10] kind          the input's kind (init, call, timeout, repair, remove), written with its events
ARGV[11] expect        the record as the worker read it ('<status>:<count>'); '' = the input ends
                       without touching the process (a skipped input: a stale timer, a second init;
                       a timer that fell due while the process was in error only clears the timer)
ARGV[12] state_mode    'k' = keep the state, 's' = set it to ARGV[13]
ARGV[13] state         the new state (msgpack, '' = None)
ARGV[14] new_events    the events to append (rec_pack of msgpack values)
ARGV[15] timer_mode    'k' = keep the timer, 'x' = cancel it, 's' = set it: in ARGV[16] ms, input
                       ARGV[17] with message ARGV[18]
ARGV[16] timer_ms
ARGV[17] timer_id
ARGV[18] timer_msg
ARGV[19] remove        '1' = delete the process (record, history, timer) after this input
ARGV[20] key           the input's key ('proc:<process id>'), released to the next input
ARGV[21] result        the response alone (msgpack, '' = None), for tasks waiting on this input
ARGV[22] keep          the process type's max_events: after the append, events older than the last
                       ``keep`` are deleted (the record's first moves on); 0 = keep them all
Returns 1 = written (or a string: written, and the inbox ids of late waiters to notify, with the
token '!' if tasks waiting on it were told), 0 = no such task, -3 = lease not held (write refused),
-8 = the process changed since it was read (nothing written: the lease expires and the input runs
again from the process as it is).
]]
--- @include "now"
--- @include "active"
--- @include "counters"
--- @include "notify"
--- @include "events"
--- @include "serial"
--- @include "process"
--- @include "slots"
local id, pid = ARGV[1], ARGV[9]
local m, code = claim_active(KEYS[1], KEYS[2], id, ARGV[2], 0, false)
if code ~= 1 then
  return code
end
local now = now_ms(ARGV[6])
local raw = redis.call('HGET', KEYS[17], pid)
local r = raw and rec_unpack(raw)
if ARGV[11] ~= '' then
  if not r or r[R_STATUS] .. ':' .. r[R_N] ~= ARGV[11] then
    return -8
  end
end
-- the input ends (first: the removals, so a full Redis cannot stop the commit half-way)
redis.call('ZREM', KEYS[2], id)
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), id)
  redis.call('HSET', KEYS[1], id, 'c' .. ARGV[3])
else
  redis.call('HDEL', KEYS[1], id)
end
bump(KEYS[4], KEYS[5], tonumber(ARGV[5]))
local cap = events_cap(KEYS[10])
emit(KEYS[9], cap, 'e', 'completed', 'id', id, 'type', msg_type(m),
     'attempt', ARGV[8])
if ARGV[11] ~= '' then
  if ARGV[19] == '1' then
    proc_cancel_timer(KEYS[1], KEYS[20], KEYS[12], r[R_TIMER], id)
    proc_drop_history(KEYS[19], pid, proc_first(r), tonumber(r[R_N]))
    redis.call('HDEL', KEYS[17], pid)
    redis.call('ZREM', KEYS[18], pid)
    emit(KEYS[9], cap, 'e', 'process_removed', 'process', pid, 'id', id)
  else
    local n = tonumber(r[R_N])
    for _, data in ipairs(rec_unpack(ARGV[14])) do
      n = n + 1
      redis.call('HSET', KEYS[19], pid .. ':' .. n, rec_pack({tostring(now), id, ARGV[10], data}))
    end
    r[R_N] = tostring(n)
    local keep, first = tonumber(ARGV[22]), proc_first(r)
    if keep > 0 and n - keep >= first then
      proc_drop_history(KEYS[19], pid, first, n - keep)
      r[R_FIRST] = tostring(n - keep + 1)
    end
    r[R_STATUS], r[R_BROKEN], r[R_ERROR], r[R_UPDATED] = 'running', '', '', tostring(now)
    if ARGV[12] == 's' then
      r[R_STATE] = ARGV[13]
    end
    if ARGV[15] ~= 'k' or r[R_TIMER] == id then  -- a timer that fired is spent
      proc_cancel_timer(KEYS[1], KEYS[20], KEYS[12], r[R_TIMER], id)
      r[R_TIMER], r[R_DUE] = '', ''
    end
    if ARGV[15] == 's' then
      local due = now + tonumber(ARGV[16])
      redis.call('HSET', KEYS[1], ARGV[17], 's' .. ARGV[18])
      signal_if_first(KEYS[20], due, KEYS[21])
      redis.call('ZADD', KEYS[20], due, ARGV[17])
      emit(KEYS[9], cap, 'e', 'scheduled', 'id', ARGV[17], 'type', msg_type(ARGV[18]), 'due', due)
      r[R_TIMER], r[R_DUE] = ARGV[17], tostring(due)
    end
    redis.call('HSET', KEYS[17], pid, rec_pack(r))
    redis.call('ZADD', KEYS[18], now, pid)
  end
elseif r and r[R_TIMER] == id then
  -- a skipped input that is the process's timer (it fell due while the process was in error): the
  -- timer is spent, so the record no longer names it (the repair's processor may set a new one)
  r[R_TIMER], r[R_DUE] = '', ''
  redis.call('HSET', KEYS[17], pid, rec_pack(r))
end
key_release(KEYS[1], KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[9], cap, KEYS[16], ARGV[20], id)
slot_freed(KEYS[10], KEYS[2], KEYS[13], KEYS[14], KEYS[15])  -- a slot freed under a concurrency limit wakes a worker
return told(notify(KEYS[6], KEYS[7], KEYS[8], id, ARGV[7]), tell_children(KEYS[22], KEYS[23], id, 'c', ARGV[21]))
