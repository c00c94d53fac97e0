--[[ key_gate: scheduled -> pending (its key was free: it holds it now) or blocked, for keyed tasks
that fell due (enqueue(key=..., process_in=...), a durable run's timer). The forwarder leaves due
keyed tasks in the scheduled zset and names them with their keys (read from their messages); the
caller gates a batch of them here, one call (each key's list must be among KEYS: the lists of one
queue share its slot), usually sent with the queue's next forward. A crash in between leaves the
tasks due: the next pass names them again. Each item is checked and gated on its own, in order;
one wake-up for the call, and the events (enqueued, blocked) of one kind, type and tenant in
entries of many ids (includes/events emit_ids).
KEY tasks          tasks hash
KEY scheduled      scheduled zset
KEY @serial
KEY @events
KEY keylists...    the items' keys' lists of waiting ids, named by index j from ARGV: K.keylists[j]
ARG now            '' = Redis time; else a simulated time in ms
ARG items... {id key keylist}  one item per due keyed task:
        id         the task's id
        key        its key, as forward named it: the task's message must still have it
        keylist    index j of its key's list in K.keylists[j]
Returns one code per item, in order: 1 = pending (it holds the key), 2 = blocked, 0 = nothing done
(its key changed since it was named, not scheduled any more, or not due yet).
]]
--- @include "now"
--- @include "serial"
--- @include "stored"
--- @include "evbatch"
local now = now_ms(A.now)
local cap = events_cap(K.conf)  -- (once a call: gating writes events, never the cap)
local out, events, pending = {}, ev_batch(), false
for i = 1, A.items.n do
  local it = A.items[i]
  local id = it.id
  local v = redis.call('HGET', K.tasks, id)
  local due = v and stored_state(v) == 's' and (msg_key(v, 2) or '(unreadable)') == it.key
              and tonumber(redis.call('ZSCORE', K.scheduled, id))
  if not due or due > now then
    out[i] = 0
  else
    redis.call('ZREM', K.scheduled, id)
    local code = key_place(K.tasks, K.keyheld, K.blocked, G.pending, K.wake, K.events, cap,
                           K.keylists[tonumber(it.keylist)], it.key, id, stored_msg(v), now)
    out[i], pending = code, pending or code == 1
    if cap > 0 then
      ev_batch_add(events, ADMITTED[code], id, msg_type(v, 2), msg_tenant(v, 2) or '')
    end
  end
end
if pending then
  signal(K.wake)
end
ev_batch_emit(K.events, cap, events)
return out
