--- The queue's limits, the dequeue's account of them (lua/dequeue.lua; set by Inspector.set_limits,
--- conf fields read by includes/dq_gate): 'concurrency' = at most this many of the queue's tasks
--- active across all workers (the lease zset's size); 'rate' (tasks per second) and 'burst' = a
--- token bucket ('tokens', 'ts' its state) that each task taken uses one token of.
--- Admitted before the take (this include, a block of the dequeue's body): s.count lowered to what the limits allow now; s.wait = the ms
--- before a dequeue may get a task: the next token of the rate (> 0), or -LIMIT_WAIT for a full
--- concurrency limit (negative: unless a slot frees sooner). A limited dequeue leaves no wake-up
--- token (the workers it would wake could take nothing either).
--- Settled after the lease (includes/dq_account): the bucket refilled up to now, less a token per task taken,
--- and the rate's waiter (conf fields 'waiter', 'waiter_until'): of the workers the rate holds
--- back, ONE (A.name, the first held back while no other waits) is told when the next token is
--- due (wait > 0) and is expected until then + RATE_GRACE; every other one sleeps on the wake list
--- (a wake-up token, or its wait, ends it): the next token draws one worker, not all of them. Their
--- waits (negative) end at least LIMIT_WAIT from now, not before the waiter's turn lapses, and
--- POLL_STEP apart (conf field 'polls': when the last of them is told to look again), at most
--- POLL_MAX from now: up to 40 of them look at most 4 times a second in all (the fallback, should
--- the waiter not come); more, each every POLL_MAX (which a worker's idle wait caps anyway: no
--- schedule runs away). The waiter that comes and is held back again stays the waiter; one that
--- takes its tokens and wants no more (or a waiter gone past its turn) leaves the turn to the next
--- held back. Sets s.expected: another worker is the waiter, expected for the next token (a
--- dequeue that uses up the bucket while tasks remain wakes one worker only when no waiter is
--- expected: it comes, is held back and becomes the waiter).
local LIMIT_WAIT = 1000
local RATE_GRACE = 500  -- ms the rate's waiter may be late for its token before another takes its turn
local POLL_STEP = 250  -- ms between two looks of the workers the rate's waiter stands for (at most 4 a second)
local POLL_MAX = 10000  -- ms: the longest they are told to sleep (a worker's idle wait, 10 s by default)
do
  local count, now = s.count, s.now
  if s.limit then
    local free = s.limit - redis.call('ZCARD', K.lease)
    if free < count then
      count = math.max(free, 0)
      s.wait = -LIMIT_WAIT  -- negative: held back by the concurrency limit (a freed slot ends it sooner)
    end
  end
  local rate, tokens = s.rate, 0
  s.bucket, s.rate_held = false, false
  if rate and count > 0 then
    s.bucket = true
    local burst = tonumber(s.burst) or 1
    tokens = tonumber(s.tokens) or burst
    local ts = tonumber(s.ts) or now
    tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
    if tokens < count then
      count = math.floor(tokens)
      s.wait = math.max(1, math.ceil((1 - (tokens - count)) * 1000 / rate))
      s.rate_held = true
    end
  end
  s.count, s.tokens = count, tokens
end
