--- @include "state"
--- @include "priority"
--- take(container, state, id, window, hint): remove a task's id from the list or zset of its state
--- (the caller has checked the task's state char). A zset member goes with ZREM. A pending id is
--- looked for at most ``window`` places from each end of the list (LPOS ... MAXLEN, then LREM from
--- that end: O(window)), never by a scan of the whole list. An id deeper in a long list is located
--- by the caller, who passes its index as ``hint`` (-1 = none): the HINT_SPAN ids from there (the
--- id has moved right by as many tasks as were enqueued since it was located) are read instead, and
--- the id is overwritten in place with the placeholder '' (LSET: one hop per list node), which
--- workers (no task data under '') and listings skip.
--- pk: the pending keys (includes/priority). A pending id of a priority other than the default is
--- in the queue's prio zset (pk[2]), looked for there first (ZREM). A pending task with a tenant
--- (its stored value ``v`` says) is in the tenant zset pk[3], under the member its tenant,
--- priority and seq make: with a hint (its seq, located by the caller) that member is removed;
--- without, the ``window`` first and last members of its tenant's band are looked at. A tenant
--- left with no pending task leaves the ring (pk[4]).
--- Returns true if the id was removed, false if it was not found.
local HINT_SPAN = 2000
local function tenant_idle(pk)  -- no tenant has pending tasks: the virtual time and seq start again
  if redis.call('ZCARD', pk[4]) == 0 and redis.call('ZCARD', pk[3]) == 0 then  -- (ZCARD, not EXISTS: a producer's drop_oldest takes too)
    tenant_rest(pk[5])  -- (a tenant's settings stay)
  end
end
local function take_tenant(pk, tenant, id, window, hint, v)
  local p = msg_priority(v, 2)
  local lo, hi = '[' .. tenant .. '\0' .. tenant_band(p), '(' .. tenant .. '\0' .. string.char(58 - p)
  local member = nil
  if hint >= 0 then
    member = tenant_member(tenant, p, hint, id)
  else
    for _, rev in ipairs({false, true}) do
      local got = rev and redis.call('ZRANGE', pk[3], hi, lo, 'BYLEX', 'REV', 'LIMIT', 0, window)
        or redis.call('ZRANGE', pk[3], lo, hi, 'BYLEX', 'LIMIT', 0, window)
      for _, m in ipairs(got) do
        if string.sub(m, -#id) == id and #m == #tenant + 18 + #id then
          member = m
          break
        end
      end
      if member then break end
    end
  end
  if not member or redis.call('ZREM', pk[3], member) == 0 then
    return false
  end
  if #redis.call('ZRANGE', pk[3], '[' .. tenant .. '\0', '(' .. tenant .. '\1', 'BYLEX', 'LIMIT', 0, 1) == 0 then
    redis.call('ZREM', pk[4], tenant)  -- no pending task left: out of the ring
    tenant_idle(pk)
  end
  return true
end
local function take(container, state, id, window, hint, pk, v)
  if state ~= 'p' then
    return redis.call('ZREM', container, id) == 1
  end
  local tenant = v and msg_tenant(v, 2)
  if tenant then
    if not pk[5] then
      return error('asynqpy: a tenant task taken by a script that does not name the tenant keys')
    end
    return take_tenant(pk, tenant, id, window, hint, v)
  end
  local prio = pk and pk[2]
  if prio and redis.call('ZREM', prio, id) == 1 then
    return true
  end
  if hint >= 0 then
    local ids = redis.call('LRANGE', container, hint, hint + HINT_SPAN - 1)
    for i, v in ipairs(ids) do
      if v == id then
        redis.call('LSET', container, hint + i - 1, '')
        return true
      end
    end
    return false
  end
  if redis.call('LPOS', container, id, 'RANK', -1, 'MAXLEN', window) then
    redis.call('LREM', container, -1, id)
    return true
  end
  if redis.call('LPOS', container, id, 'MAXLEN', window) then
    redis.call('LREM', container, 1, id)
    return true
  end
  return false
end

--- take_each(tkey, container, state, window, items, act, pk): the loop of the operator scripts
--- over the per-task items {id hint read key} of ``items`` (the script's stride tail A.items): for each task still
--- in ``state`` and still the one the caller read (``read``: the stored value the caller read, byte
--- for byte; the id may have been reused for another task since, whose keys the caller does not
--- know), take it out of ``container`` and call act(id, stored value, n), n being the task's
--- number (1, 2, ...: its per-task keys and its ``key`` are found with it); ``pk``: as in take.
--- Returns one code per task: 1 = done, 0 = no such task, -5 = in another state, -6 = a pending id
--- not found (no usable hint), -8 = the task changed since the caller read it (read it again).
local function take_each(tkey, container, state, window, items, act, pk)
  local out = {}
  for n = 1, items.n do
    local it = items[n]
    local id, hint = it.id, tonumber(it.hint)
    local v, code = check_state(tkey, container, state, id)
    if v and v ~= it.read then
      v, code = nil, -8
    end
    if v then
      if take(container, state, id, window, hint, pk, v) or hint == -2 then
        act(id, v, n, it)
      else
        code = -6
      end
    end
    out[#out + 1] = code
  end
  return out
end
