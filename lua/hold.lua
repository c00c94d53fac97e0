--[[ hold: block or unblock a task type in a queue (deploy holds, includes/hold)
'block' adds the type to the queue's blocked types (conf field 'holds'): from the next dequeue, its
pending tasks are held in the scheduled zset (state 's', score TYPE_BAND + when) instead of
leased; nothing else moves. 'unblock' removes it, then puts back held tasks whose type is no
longer blocked (a crash between two calls leaves nothing stuck: any later unblock call, of any
type, puts them back), at the front of the pending tasks, the oldest held first: it reads the
type band from its newest end, skipping ``offset`` tasks still blocked, ``batch`` at a time (the
caller calls again while ``more``). 'list' changes nothing.
KEY conf           the queue's settings hash (fields 'holds', 'hseq': includes/hold)
KEY scheduled      scheduled zset (held tasks wait there)
KEY tasks          tasks hash
KEY @pending
KEY wake           wake-up list (a worker is woken when tasks were put back)
ARG action         'block', 'unblock' or 'list'
ARG type           the task type ('' with 'list', or with 'unblock' to only put back what no
                   blocked type holds)
ARG batch          most held tasks read by this call
ARG offset         held tasks of still-blocked types already skipped (0 on the first call)
Returns {moved, offset, more, blocked types...}: moved = tasks put back by this call; offset to
pass to the next call; more = 1 when the band may hold more to read.
]]
--- @include "hold"
--- @include "operator"
--- @include "signal"
--- @include "stored"
operator_only(K.conf)  -- an operator's: a producer is refused here, before any write
local action, t = A.action, A.type
local holds = redis.call('HGET', K.conf, 'holds')
if action == 'block' then
  holds = hold_types_add(holds, t)
  redis.call('HSET', K.conf, 'holds', holds)
elseif action == 'unblock' then
  holds = hold_types_del(holds, t)
  if holds == '' then
    redis.call('HDEL', K.conf, 'holds')
  else
    redis.call('HSET', K.conf, 'holds', holds)
  end
end
local moved, offset, more = 0, tonumber(A.offset) or 0, 0
if action == 'unblock' then
  local pk = G.pending
  local batch = tonumber(A.batch)
  local got = redis.call('ZRANGE', K.scheduled, '+inf', string.format('%.0f', TYPE_BAND), 'BYSCORE', 'REV',
    'LIMIT', offset, batch)
  more = #got == batch and 1 or 0
  for _, id in ipairs(got) do  -- (newest first: each to the front, so the oldest ends first in line)
    local v = redis.call('HGET', K.tasks, id)
    if stored_state(v) ~= 's' then
      redis.call('ZREM', K.scheduled, id)  -- a stale entry (the task is gone)
    elseif holds ~= '' and string.find(holds, '\0' .. msg_type(v, 2) .. '\0', 1, true) then
      offset = offset + 1  -- still blocked
    else
      redis.call('ZREM', K.scheduled, id)
      redis.call('HSET', K.tasks, id, 'p' .. stored_msg(v))
      push_pending(pk, id, v, 2, true)
      moved = moved + 1
    end
  end
  if moved > 0 then
    signal(K.wake)
  end
  if holds == '' and #redis.call('ZRANGE', K.scheduled, string.format('%.0f', TYPE_BAND), '+inf', 'BYSCORE', 'LIMIT', 0, 1) == 0 then
    redis.call('HDEL', K.conf, 'hseq')  -- nothing held for a type: nothing kept
  end
end
local out = {moved, offset, more}
for name in string.gmatch(holds or '', '[^%z]+') do
  out[#out + 1] = name
end
return out
