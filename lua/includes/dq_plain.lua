--- The plain take (the dequeue's take stage, includes/dq_take; includes/priority): up to n pending
--- ids without a tenant, the highest priority first: priorities 9..6 from the prio zset (scores
--- below HIGH_END), then the default priority from the right of the pending list (oldest first),
--- then priorities 4..0. The prio zset is read only when its size (s.prios, one ZCARD per dequeue)
--- says it is not empty, and s.prios follows what is taken (the reply's 'remaining').
--- take_plain(s, n): the ids taken (not yet checked: the lease stage reads and checks them).
local function take_plain(s, n)
  local ids = {}
  if s.prios > 0 then
    ids = redis.call('ZRANGE', K.prio, '-inf', '(' .. string.format('%.0f', HIGH_END), 'BYSCORE', 'LIMIT', 0, n)
    if #ids > 0 then
      redis.call('ZREM', K.prio, unpack(ids))
      s.prios = s.prios - #ids
    end
  end
  if #ids < n then
    local popped = redis.call('RPOP', K.pending, n - #ids)
    if popped then
      if #ids == 0 then
        ids = popped
      else
        for _, id in ipairs(popped) do
          ids[#ids + 1] = id
        end
      end
    end
    if #ids < n and s.prios > 0 then  -- (the higher priorities are all taken)
      local low = redis.call('ZRANGE', K.prio, 0, n - #ids - 1)
      if #low > 0 then
        redis.call('ZREM', K.prio, unpack(low))
        s.prios = s.prios - #low
        for _, id in ipairs(low) do
          ids[#ids + 1] = id
        end
      end
    end
  end
  return ids
end
