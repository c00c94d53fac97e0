--- The dequeue's reply (lua/dequeue.lua): {now, remaining, wait, id1, msg1, ...}. remaining: the
--- pending tasks left (-1 when the queue is paused: the gate); wait: 0, or the limits' wait
--- (includes/dq_limits: > 0 the rate's next token, < 0 sleep on the wake list), or, when the
--- tenants' rates hold every task left, the ms until the first of them conforms (includes/dq_tenant).
--- If tasks remain and nothing holds them back, one wake-up token is left so another idle worker
--- comes to help (none while the rate's waiter is expected: it comes for the next token).
do
  local out = s.out
  out[2] = s.remaining
  if s.rate_wait and s.wait == 0 then  -- tenants' rates hold every task left: look again at the next token
    s.wait = s.rate_wait
  end
  if s.remaining > 0 then
    if s.wait ~= 0 then
      out[3] = s.wait
    elseif not s.expected then
      signal(K.wake)
    end
  end
  if acked then  -- (lua/done_dequeue.lua: its acknowledgement's reply first)
    return {acked, out}
  end
  return out
end
