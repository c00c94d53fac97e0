--- check_state(tkey, container, state, id): the task's stored value if it is in ``state``, else
--- nil and a code: 0 = no such task (a stale zset entry is removed on the way), -5 = another state.
--- @include "stored"
local function check_state(tkey, container, state, id)
  local v = redis.call('HGET', tkey, id)
  if not v then
    if state ~= 'p' then
      redis.call('ZREM', container, id)
    end
    return nil, 0
  end
  if stored_state(v) ~= state then
    return nil, -5
  end
  return v, 1
end
