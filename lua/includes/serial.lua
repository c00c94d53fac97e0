--- Keyed serial execution (enqueue(..., key=...); docs/architecture.md "Keyed serial execution"):
--- tasks sharing a key within a queue run one at a time, in enqueue order. The key's holder (the
--- one task of the key that may be pending, active or waiting for a retry) is in the queue's
--- keyheld hash; the tasks behind it wait in state 'b' in the key's list (and the blocked zset).
--- key_release(t, keyheld, blocked, pending, prio, wake, events, cap, list, key, id): the task
--- ``id`` ended: if it holds ``key``, the next live task of the key's list becomes pending and the
--- holder (ids whose task is gone or no longer blocked are skipped), or the key is freed.
--- Returns the new holder's id, or false.
--- is_keyed(m, i): whether the message starting at byte i of m has a key (its array reaches the
--- key field, codec's KEY_INDEX = 23: trailing defaults are left out of the encoding).
--- @include "signal"
--- @include "priority"
--- @include "events"
local KEY_INDEX = 23
local function is_keyed(m, i)
  local b = string.byte(m, i)
  if b == 0xdc then
    local n = string.byte(m, i + 1) * 256 + string.byte(m, i + 2)
    return n > KEY_INDEX
  end
  return b == 0xdd
end
local function key_release(t, keyheld, blocked, pending, prio, wake, events, cap, list, key, id)
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
    if v and string.sub(v, 1, 1) == 'b' then
      local msg = string.sub(v, 2)
      redis.call('HSET', t, nxt, 'p' .. msg)
      redis.call('ZREM', blocked, nxt)
      push_pending(pending, prio, nxt, msg_priority(msg, 1))
      signal(wake)
      emit(events, cap, 'e', 'enqueued', 'id', nxt, 'type', msg_type(msg))
      redis.call('HSET', keyheld, key, nxt)
      return nxt
    end
  end
end
