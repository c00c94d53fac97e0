--- release(t, pk, wake, scheduled, tick, events, cap, id, msg, due, now): a workflow
--- child whose parents have all ended (or that had none left to wait for) is stored pending, or
--- scheduled when its due time (ms, Redis clock; 0 = none) is still ahead. Returns 1 pending, 4
--- scheduled.
--- @include "signal"
--- @include "priority"
--- @include "events"
local function release(t, pk, wake, scheduled, tick, events, cap, id, msg, due, now)
  if due > now then
    redis.call('HSET', t, id, 's' .. msg)
    signal_if_first(scheduled, due, tick)
    redis.call('ZADD', scheduled, due, id)
    emit_task(events, cap, msg_tenant(msg, 1), 'e', 'scheduled', 'id', id, 'type', msg_type(msg), 'due', due)
    return 4
  end
  redis.call('HSET', t, id, 'p' .. msg)
  push_pending(pk, id, msg, 1)
  signal(wake)
  emit_task(events, cap, msg_tenant(msg, 1), 'e', 'enqueued', 'id', id, 'type', msg_type(msg))
  return 1
end
