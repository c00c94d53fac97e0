--- Deploy holds (asynqpy/core/deploy/versions.py; docs/deploy.md "Holding tasks during a deploy"): a task
--- the dequeuing worker must not run waits in its queue's scheduled zset, in state 's', at a
--- score no due time reaches (HOLD_FLOOR, year 33658; task times stop at year 9999), so the
--- forwarder never moves it and every operator action on a scheduled task applies to it:
---   VERSION_BAND + v   it needs a worker of version v or newer (the message's min_version),
---                      and the worker that dequeued it was older (or had no version)
---   TYPE_BAND + n      its type is blocked in the queue (the conf hash field 'holds': the
---                      blocked types, each between NUL bytes); n counts the tasks held so (conf
---                      field 'hseq'), so they go back in the order they were held
--- hold_score(holds, v, version, conf): the score at which the pending task of stored value ``v``
--- is held from a worker of ``version`` (0: none given), or nil when it may run it. O(1) unless
--- ``holds`` is set (the type is read) or the message reaches the min_version field.
--- type_held(holds, v): whether the type of the task of stored value ``v`` is blocked.
--- hold_types_add(holds, t) / hold_types_del(holds, t): the 'holds' field with type t added or
--- removed ('' or nil: none blocked).
--- @include "priority"
--- @include "events"
--- @include "bands"
local MIN_VERSION_INDEX = F.min_version
local function msg_min_version(m, i)
  local at = msg_field(m, i, MIN_VERSION_INDEX)
  local b = at and string.byte(m, at)
  if not b then return 0 end
  if b <= 0x7f then return b end
  if b >= 0xcc and b <= 0xcf then  -- uint 8/16/32/64
    return mp_uint(m, at + 1, 2 ^ (b - 0xcc)) or 0
  end
  return 0
end
local function type_held(holds, v)  -- the type of the task of stored value v is blocked
  return holds and holds ~= '' and string.find(holds, '\0' .. msg_type(v, 2) .. '\0', 1, true) ~= nil
end
local function hold_score(holds, v, version, conf)
  if (not holds or holds == '') and msg_short(v, 2, MIN_VERSION_INDEX) then
    return nil  -- (no type blocked, and a message too short to name a version: the usual case, no walk)
  end
  if type_held(holds, v) then
    return TYPE_BAND + redis.call('HINCRBY', conf, 'hseq', 1)
  end
  local need = msg_min_version(v, 2)
  if need > version then  -- (a need past VERSION_MAX, never encoded: at its band's top, not in TYPE_BAND)
    return VERSION_BAND + math.min(need, VERSION_MAX)
  end
  return nil
end
local function hold_types_add(holds, t)
  holds = (holds and holds ~= '') and holds or '\0'
  if string.find(holds, '\0' .. t .. '\0', 1, true) then
    return holds
  end
  return holds .. t .. '\0'
end
local function hold_types_del(holds, t)
  if not holds or holds == '' then
    return ''
  end
  local a, b = string.find(holds, '\0' .. t .. '\0', 1, true)
  if not a then
    return holds
  end
  local left = string.sub(holds, 1, a) .. string.sub(holds, b + 1)
  return left == '\0' and '' or left
end
