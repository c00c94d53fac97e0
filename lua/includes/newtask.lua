--- The id rules of the scripts that store new tasks (enqueue, enqueue_many, schedule, group_add,
--- enqueue_target).
--- @include "unique"
--- @include "stored"
---
--- Sent again: a client whose reply was lost (a timeout, a dropped connection) cannot tell whether
--- its call ran, and redis-py sends it again. A call must then recognise its own earlier write
--- and report success without writing anything: a caller-chosen id must not conflict with its own
--- task, a unique task must not be a duplicate of itself, a generated id must not be stored or
--- pushed twice (a second push under an active task would steal its lease).

--- own_write(old, msg): is the stored value ``old`` this very message, as stored by the call
--- itself? The message is stored unchanged while pending, scheduled, aggregating, targeted, waiting,
--- blocked behind its key or active ('a' .. 8-char lease token .. message); retry, archive and
--- completion rewrite it. (OWN_STATES lists every state a new task is stored in or moves to unchanged.)
local OWN_STATES = {p = true, s = true, g = true, m = true, w = true, b = true}
local function own_write(old, msg)
  local st = stored_state(old)
  if st == 'a' then
    return stored_msg(old) == msg
  end
  return OWN_STATES[st] == true and stored_msg(old) == msg
end

--- new_id(tkey, id, msg, check): may a new task be stored under ``id``? Returns
---   'new'  : no task has this id;
---   'replace': a finished task (archived, completed) has it: the new task replaces it;
---   'own'  : this call's own earlier write (sent again): report success, write nothing;
---   'taken': a live task (pending, active, scheduled, retry) has the id: a conflict.
--- ``check`` false: the id was generated (96 random bits): any task stored under it is the
--- call's own, whatever became of it since.
local function new_id(tkey, id, msg, check)
  local old = redis.call('HGET', tkey, id)
  if not old then
    return 'new'
  end
  if not check or own_write(old, msg) then
    return 'own'
  end
  local st = stored_state(old)
  if st == 'x' or st == 'c' then
    return 'replace'
  end
  return 'taken'
end

--- forget_finished(archived, completed, id): a replaced finished task leaves its zset.
local function forget_finished(archived, completed, id)
  redis.call('ZREM', archived, id)
  redis.call('ZREM', completed, id)
end

--- store_new(tkey, id, state, msg, check, lock, ttl, archived, completed): the start shared by the
--- scripts storing one new task in ``state``: the id rules (new_id), the lock (take_lock, ``ttl``
--- seconds, 0 = none), the task's first write (a full Redis refuses the call there, whole) and a
--- replaced finished task leaving its zset. Returns nil when stored; else what the script returns:
--- 1 (this call's own earlier write), -2 (a live task has the id) or the lock's refusal.
local function store_new(tkey, id, state, msg, check, lock, ttl, archived, completed)
  local seen = new_id(tkey, id, msg, check)
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
