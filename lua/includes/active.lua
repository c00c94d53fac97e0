--- claim_active(tkey, leasekey, id, token, now, recover): may the caller finish this active task?
--- An active task's stored value is 'a' .. lease token .. message (includes/stored). The token must be
--- the one stored: a worker passes the token it dequeued with (a task re-leased to someone else
--- after a lease expiry has a new token); the recoverer passes the token it read with the expired
--- lease, so a later run of the same id (re-leased, or the id reused for a new task) is never
--- mistaken for the run whose lease expired.
--- recover == true: the recoverer; the lease must also have expired (score <= now).
--- Returns message, 1 on success; nil, code otherwise:
---   0 = no such task, -3 = not active or not this run's lease, -4 = lease still alive.
--- @include "stored"
local function claim_active(tkey, leasekey, id, token, now, recover)
  local v = redis.call('HGET', tkey, id)
  if not v then
    return nil, 0
  end
  if not stored_holds(v, token) then
    return nil, -3
  end
  if recover then
    local exp = redis.call('ZSCORE', leasekey, id)
    if exp and tonumber(exp) > now then
      return nil, -4
    end
  end
  return stored_msg(v), 1
end
