--- The id rules of the scripts that store new tasks (enqueue, enqueue_many, schedule, group_add,
--- enqueue_target).
--- @include "unique"
--- @include "stored"
--- @include "priority"
---
--- Sent again: a client whose reply was lost (a timeout, a dropped connection) cannot tell whether
--- its call ran, and redis-py sends it again. A call must then recognise its own earlier write
--- and report success without writing anything: a caller-chosen id must not conflict with its own
--- task, a unique task must not be a duplicate of itself, a generated id must not be stored or
--- pushed twice (a second push under an active task would steal its lease).

--- own_write(old, msg): is the stored value ``old`` this very task, as stored by the call itself
--- (or by the caller's own earlier call of the same task)? The message is stored unchanged while
--- pending, scheduled, aggregating, targeted, waiting, blocked behind its key or active ('a' .. 8-char
--- lease token .. message); the task's own end rewrites some of its fields (a retry, an archive, a
--- completion: REWRITTEN_FIELD), so a task is also recognised field by field (same_task):
---   a live task (pending, active, scheduled, retry, aggregating, targeted, waiting, blocked) with
---   the same fields but the rewritten ones and its enqueue time: the caller's own task, sent again
---   by the connection or by the application (a new call of the same task: a later enqueue time);
---   a finished task (archived, completed) with the same fields, its enqueue time included (and
---   not 0): this very call, sent again after its task finished (issue 42 #7). A new call of the
---   same task (a later enqueue time) replaces a finished one (runs it again), as documented.
local LIVE_STATES = {p = true, a = true, s = true, r = true, g = true, m = true, w = true, b = true}
local ENQUEUED_AT = F.enqueued_at_ms + 1  -- (1-based)
-- (1-based) the fields a task's own end rewrites: retried, last_error, last_failed_at_ms,
-- completed_at_ms, result, traceback, logs (core/model/codec.py REWRITTEN_FIELDS)
local REWRITTEN_FIELD = {[F.retried + 1] = true, [F.last_error + 1] = true, [F.last_failed_at_ms + 1] = true,
                         [F.completed_at_ms + 1] = true, [F.result + 1] = true, [F.traceback + 1] = true,
                         [F.logs + 1] = true}
-- (1-based) each field's default, encoded: a field the encoding leaves out (trailing defaults) reads
-- as it (core/model/codec.py: Message's defaults, in order)
local FIELD_DEFAULT = {'', '\192', '\0', '\25', '\255', '\0', '\0', '\194', '\0', '\160', '\0', '\255', '\0',
                       '\192', '\160', '\192', '\160', '\160', '\160', '\5', '\192', '\1', '\192', '\160', '\194',
                       '\160', '\192', '\0'}
local function msg_fields(m)  -- the encoded fields of message m (its array's items), nil if unreadable
  local b, n, i = string.byte(m, 1), 0, 1
  if b and b >= 0x90 and b <= 0x9f then
    n, i = b - 0x90, 2
  elseif b == 0xdc then
    n, i = mp_uint(m, 2, 2) or 0, 4
  else
    return nil
  end
  local out = {}
  for f = 1, n do
    local j = mp_skip(m, i)
    if not j then
      return nil
    end
    out[f] = string.sub(m, i, j - 1)
    i = j
  end
  return out
end
--- same_task(a, b, same_time): are messages a and b the same task, the fields its end rewrites
--- aside (and its enqueue time, unless ``same_time``: then it must be equal and not 0)?
local function same_task(a, b, same_time)
  local fa, fb = msg_fields(a), msg_fields(b)
  if not fa or not fb then
    return false
  end
  for f = 1, math.max(#fa, #fb) do
    if not REWRITTEN_FIELD[f] and (same_time or f ~= ENQUEUED_AT)
        and (fa[f] or FIELD_DEFAULT[f]) ~= (fb[f] or FIELD_DEFAULT[f]) then
      return false
    end
  end
  return not same_time or (fa[ENQUEUED_AT] or '\0') ~= '\0'
end
local function own_write(old, msg)
  local st, m = stored_state(old), stored_msg(old)
  if st == 'x' or st == 'c' then
    return same_task(m, msg, true)
  end
  return LIVE_STATES[st] == true and (m == msg or same_task(m, msg, false))
end

--- new_id(tkey, id, msg, check): may a new task be stored under ``id``? Returns
---   'new'  : no task has this id;
---   'replace': another finished task (archived, completed) has it: the new task replaces it
---            (unless ``keep``: then it is 'taken', a conflict: an idempotent call's repeat, which
---            must answer the finished call, not run it again);
---   'own'  : this call's own earlier write (sent again), or the caller's own task (own_write):
---            report success, write nothing;
---   'taken': another live task (pending, active, scheduled, retry, ...) has the id: a conflict.
--- ``check`` false: the id was generated (96 random bits): any task stored under it is the
--- call's own, whatever became of it since.
local function new_id(tkey, id, msg, check, keep)
  local old = redis.call('HGET', tkey, id)
  if not old then
    return 'new'
  end
  if not check or own_write(old, msg) then
    return 'own'
  end
  local st = stored_state(old)
  if (st == 'x' or st == 'c') and not keep then
    return 'replace'
  end
  return 'taken'
end

--- forget_finished(archived, completed, id): a replaced finished task leaves its zset.
local function forget_finished(archived, completed, id)
  redis.call('ZREM', archived, id)
  redis.call('ZREM', completed, id)
end

--- store_new(tkey, id, state, msg, check, lock, ttl, archived, completed, keep): the start shared by the
--- scripts storing one new task in ``state``: the id rules (new_id), the lock (take_lock, ``ttl``
--- seconds, 0 = none), the task's first write (a full Redis refuses the call there, whole) and a
--- replaced finished task leaving its zset. Returns nil when stored; else what the script returns:
--- 1 (this call's own earlier write), -2 (a live task has the id) or the lock's refusal.
local function store_new(tkey, id, state, msg, check, lock, ttl, archived, completed, keep)
  local seen = new_id(tkey, id, msg, check, keep)
  if seen == 'own' then
    return 1
  elseif seen == 'taken' then
    return -2
  end
  local refused = take_lock(lock, id, ttl)
  if refused then
    return refused
  end
  redis.call('HSET', tkey, id, state .. msg)  -- first write: a full Redis refuses the call here
  if seen == 'replace' then
    forget_finished(archived, completed, id)
  end
  return nil
end
