--- claim_active(tkey, leasekey, id, token, now): may the caller finish this active task?
--- An active task's stored value is 'a' .. <8-char lease token> .. <message>.
--- token ~= ''  : the worker that dequeued it; its token must still be the one stored
---                (a task re-leased to someone else after a lease expiry has a new token).
--- token == ''  : the recoverer; the lease must have expired (score <= now).
--- Returns message, 1 on success; nil, code otherwise:
---   0 = no such task, -3 = not active or not this worker's lease, -4 = lease still alive.
local function claim_active(tkey, leasekey, id, token, now)
  local v = redis.call('HGET', tkey, id)
  if not v then
    return nil, 0
  end
  if string.sub(v, 1, 1) ~= 'a' then
    return nil, -3
  end
  if token ~= '' then
    if string.sub(v, 2, 9) ~= token then
      return nil, -3
    end
  else
    local exp = redis.call('ZSCORE', leasekey, id)
    if exp and tonumber(exp) > now then
      return nil, -4
    end
  end
  return string.sub(v, 10), 1
end
