--- Keyed serial execution (enqueue(..., key=...); docs/internals-features.md "Keyed serial execution"):
--- tasks sharing a key within a queue run one at a time, in enqueue order. The key's holder (the
--- one task of the key that may be pending, active or waiting for a retry) is in the queue's
--- keyheld hash; the tasks behind it wait in state 'b' in the key's list (and the blocked zset).
--- key_release(t, keyheld, blocked, pk, wake, events, cap, list, key, id): the task
--- ``id`` ended: if it holds ``key``, the next live task of the key's list becomes pending and the
--- holder (ids whose task is gone or no longer blocked are skipped), or the key is freed.
--- Returns the new holder's id, its message and its tenant (nil: none), or false.
--- key_admit(t, keyheld, blocked, pk, wake, events, cap, list, key, id, msg, now): a task
--- of ``key`` comes in (enqueued, or due): it takes the key if it is free (a stale holder, one that
--- ended or is gone, is released first; a scheduled one, snoozed or postponed, keeps it) and is pending, else it waits at the back of the key's
--- list, blocked. Returns 1 pending, 2 blocked. key_place(...): the same without the task's own
--- wake-up and event (ADMITTED[code] names it), for a caller that signals once and emits a batch's
--- events together (key_gate); a stale holder's release still signals and emits its own.
--- key_take(keyheld, key, id): ``id`` takes ``key`` if no task holds it (or it holds it itself: a
--- snoozed or postponed holder due again): true; false if another task holds it (key_gate, with
--- the key's list among its KEYS, queues it behind that one or frees a stale holder first). The
--- forwarder's own path for a due keyed task whose key is free (forward.lua): no list is touched.
--- is_keyed(m, i): whether the message starting at byte i of m has a key: its array reaches the
--- key field (F.key, codec's KEY_INDEX: trailing defaults are left out of the encoding) and the key is
--- not '' (a message with a later field set, retry_front or a tenant, has the key field even
--- without a key).
--- task_key_at(m, at): the key of a message whose key field starts at ``at`` (msg_tail's second;
--- nil: not encoded): false = none (is_keyed's test), '(unreadable)' = a key that is not a string.
--- pk: the script's pending keys (includes/priority).
--- @include "signal"
--- @include "priority"
--- @include "events"
--- @include "stored"
local KEY_INDEX = F.key
local function is_keyed(m, i)
  local at = msg_field(m, i, KEY_INDEX)
  return at ~= nil and string.byte(m, at) ~= 0xa0  -- (0xa0: the empty string)
end
local function task_key_at(m, at)  -- the key whose field starts at ``at`` (msg_tail): false = none
  if not at or string.byte(m, at) == 0xa0 then return false end
  return key_at(m, at) or '(unreadable)'
end
local function key_take(keyheld, key, id)
  local holder = redis.call('HGET', keyheld, key)
  if holder and holder ~= id then
    return false
  end
  if not holder then
    redis.call('HSET', keyheld, key, id)
  end
  return true
end
local function key_release(t, keyheld, blocked, pk, wake, events, cap, list, key, id)
  if redis.call('HGET', keyheld, key) ~= id then
    return false
  end
  while true do
    local nxt = redis.call('LPOP', list)
    if not nxt then
      redis.call('HDEL', keyheld, key)
      return false
    end
    local v = redis.call('HGET', t, nxt)
    if stored_state(v) == 'b' then
      local msg = stored_msg(v)
      redis.call('HSET', t, nxt, 'p' .. msg)
      redis.call('ZREM', blocked, nxt)
      local tenant = push_pending(pk, nxt, msg, 1)
      signal(wake)
      if cap > 0 then
        emit_task(events, cap, tenant, 'e', 'enqueued', 'id', nxt, 'type', msg_type(msg))
      end
      redis.call('HSET', keyheld, key, nxt)
      return nxt, msg, tenant
    end
  end
end
local function key_place(t, keyheld, blocked, pk, wake, events, cap, list, key, id, msg, now)
  local holder = redis.call('HGET', keyheld, key)
  if holder == id then  -- its own key (a holder snoozed by RateLimited or postponed by an operator, due again)
    holder = nil
  elseif holder then
    local hv = redis.call('HGET', t, holder)
    local st = stored_state(hv)
    -- stale (ended, or never held it): free the key first. A scheduled holder still holds it: it was
    -- snoozed (RateLimited) or postponed, and takes its turn back when due (key_gate)
    if not hv or st == 'c' or st == 'x' or st == 'b' then
      holder = key_release(t, keyheld, blocked, pk, wake, events, cap, list, key, holder)
    end
  end
  if holder then
    redis.call('HSET', t, id, 'b' .. msg)
    redis.call('RPUSH', list, id)
    redis.call('ZADD', blocked, now, id)
    return 2
  end
  redis.call('HSET', keyheld, key, id)
  redis.call('HSET', t, id, 'p' .. msg)
  push_pending(pk, id, msg, 1)
  return 1
end
local ADMITTED = {'enqueued', 'blocked'}  -- (the event of key_place's code)
local function key_admit(t, keyheld, blocked, pk, wake, events, cap, list, key, id, msg, now)
  local code = key_place(t, keyheld, blocked, pk, wake, events, cap, list, key, id, msg, now)
  if code == 1 then
    signal(wake)
  end
  emit_task(events, cap, msg_tenant(msg, 1), 'e', ADMITTED[code], 'id', id, 'type', msg_type(msg))
  return code
end
