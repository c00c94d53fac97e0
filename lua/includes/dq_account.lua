--- The dequeue's account (lua/dequeue.lua; docs/internals-scripts.md "The dequeue, in stages"): the
--- limits a dequeue is held to, and what it leaves of them. The queue's limits (includes/dq_limits:
--- concurrency, and the rate's token bucket and waiter) are admitted before the take
--- (includes/dq_limits lowers s.count) and settled here, after the lease; the tenants' slots and rates
--- (includes/dq_tenant) are admitted and charged turn by turn in the fair take, and counted here.
--- This block: a dequeue whose slots under the concurrency limit went to tasks it held is not
--- held back by the limit (they are free again: wait 0); s.remaining = the pending tasks left
--- (the list and the prio zset, whose size the take kept: includes/priority pending_count; the
--- tenants' tasks too while a tenant is in the ring or held by its rate, not all paused; runs of
--- targeted tasks are not counted) and s.rate_wait (every tenant with work is held by its rate and
--- nothing else is left: the ms until the first next token, includes/dq_tenant); then the bucket
--- and its waiter (a dequeue with a rate: s.bucket).
do
  if s.held_any and s.wait < 0 then  -- the concurrency limit's slots held tasks took are free again: not held back by it
    s.wait = 0
  end
  s.remaining = redis.call('LLEN', K.pending) + s.prios  -- (includes/priority pending_count, prio's size known)
  if s.fair or s.count == 0 then  -- tenants' tasks count while a tenant is in the ring or held by its rate (not all paused)
    local ready = redis.call('ZRANGE', K.tr, 0, 1)  -- ('' at most once: 2 tell)
    local live = ready[1] ~= nil and (ready[1] ~= '' or ready[2] ~= nil)
    local first = not live and redis.call('ZRANGE', K.tw, 0, 0, 'WITHSCORES')[2]  -- (the first due of tw)
    local rate_wait = false
    if first then
      rate_wait = math.max(1, tonumber(first) - s.now)
    end
    if live or rate_wait then
      s.rate_wait = not live and s.remaining == 0 and rate_wait
      s.remaining = s.remaining + redis.call('ZCARD', K.tq)
    end
  end
  if s.bucket then  -- the rate's bucket and waiter (includes/dq_limits)
    local expected = false  -- another worker is the rate's waiter, expected for the next token
    do  -- the bucket refilled up to now, less a token per task taken
      local now = s.now
      local left = s.tokens - (#s.out - 3) / 2
      local until_ms = s.waiter_until
      local mine = s.waiter == A.name
      expected = until_ms ~= nil and until_ms > now and not mine
      if s.rate_held and s.remaining > 0 then
        if expected then  -- sleep on the wake list: the waiter comes for the next token
          local at = math.min(now + POLL_MAX,
            math.max(now + LIMIT_WAIT, until_ms, (tonumber(s.polls) or 0) + POLL_STEP))
          s.wait = -(at - now)
          redis.call('HSET', K.conf, 'tokens', tostring(left), 'ts', now, 'polls', at)
        else  -- this worker is the waiter
          redis.call('HSET', K.conf, 'tokens', tostring(left), 'ts', now, 'waiter', A.name,
            'waiter_until', now + s.wait + RATE_GRACE)
        end
      elseif mine and until_ms ~= nil and until_ms > now then  -- the waiter took its tokens: its turn ends
        redis.call('HSET', K.conf, 'tokens', tostring(left), 'ts', now, 'waiter_until', 0)
      else
        redis.call('HSET', K.conf, 'tokens', tostring(left), 'ts', now)
      end
      expected = expected and left < 1  -- (a token left over: a woken worker may take it now)
    end
    s.expected = expected
  end
end
