--- The dequeue's gate (lua/dequeue.lua; docs/internals-scripts.md "The dequeue, in stages"): the first
--- stage, which decides whether the dequeue takes anything at all and builds the state table ``s``
--- the other stages pass along. A paused queue (K.paused exists) yields nothing: the dequeue
--- replies {now, -1, 0} (remaining -1: paused). Otherwise one HMGET of the
--- queue's settings (K.conf) gives every field a later stage reads, each named here once (the only
--- place their positions are written):
---   cap          'events': the event stream's cap (0 = off; absent: EVENTS_CAP, includes/events)
---   limit        'concurrency': at most this many of the queue's tasks active (dq_limits)
---   rate, burst  'rate' (tasks a second) and 'burst': the queue's token bucket, 'tokens' and 'ts'
---                its state (dq_limits)
---   waiter       'waiter', 'waiter_until', 'polls': the rate's waiter and the polls of the
---                workers it stands for (dq_limits)
---   active_f     'active', 'followed': whether 'active' events are written (events active_wanted)
---   holds        'holds': the blocked task types (includes/hold; a type block)
--- and the caller's version (A.version; core/deploy/versions.py encode_version, 0 = none), which the take
--- and the lease hold tasks against (the version gate: includes/hold hold_score).
--- The state table s (one per dequeue): now, count (how many tasks may still be taken; the
--- limits lower it), wait (the reply's wait; 0 = none), out (the reply being built), runs (the
--- targeted runs taken), ids (the pending ids taken, false = none), vals (id -> stored value of
--- the tasks the fair take read), prios (the prio zset's size), fair (tenants took turns),
--- held_any (a task taken was held), and the conf fields above.
--- Each stage is a block of the dequeue's body, not a function: a script's functions are made
--- again on every call of it (~1 µs each here, measured with bench/stages_ab.py), and the stages
--- run once a call; the state they share is ``s``, the locals of each stay in its block.
local now = now_ms(A.now)
if redis.call('EXISTS', K.paused) == 1 then
  if acked then  -- (lua/done_dequeue.lua: its acknowledgement's reply first)
    return {acked, {now, -1, 0}}
  end
  return {now, -1, 0}
end
local s
do
  local conf = redis.call('HMGET', K.conf, 'events', 'concurrency', 'rate', 'burst', 'tokens', 'ts', 'waiter',
    'waiter_until', 'polls', 'active', 'followed', 'holds')
  s = {
    now = now, count = tonumber(A.count), wait = 0, out = {now, 0, 0}, runs = {}, ids = false, vals = {}, checked = {},
    prios = 0, fair = false, held_any = false, version = tonumber(A.version) or 0, bucket = false,
    rate_held = false, remaining = 0, rate_wait = false, expected = false,  -- (set by later stages: sized here)
    cap = conf[1], limit = tonumber(conf[2]), rate = tonumber(conf[3]), burst = conf[4], tokens = conf[5],
    ts = conf[6], waiter = conf[7], waiter_until = tonumber(conf[8]), polls = conf[9], active_f = conf[10],
    followed = conf[11], holds = conf[12],
  }
end
