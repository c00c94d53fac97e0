--- The exit events of a batch (includes/exit; docs/internals-scripts.md "Exit paths"), x being the
--- keys and values a script's exits share (includes/exit):
--- batch = {}: the caller ends a batch of tasks and calls exit_flush(x)
--- at its end: events that differ only by id (same event, type, attempt; no error, due or more) are
--- gathered and written as one entry per group (includes/events emit_ids: one XADD per batch
--- instead of one per task), the 'enqueued' of a key's next task too (after its holder's end);
--- flushed early before an event not gathered, so each task's events keep their order. task_exit caches
--- in it the events cap, the event's field list and whether the wake was done (once per script).
--- exit_cap(x): the events cap (read once per script). exit_gather(x, event, mtype, attempt, id,
--- tenant): the event joins its group. exit_flush(x): each group written as one entry.
--- @include "events"
local function exit_cap(x)
  if not x.cap then
    x.cap = events_cap(x.conf)
  end
  return x.cap
end
local function exit_flush(x)
  local groups = x.batch
  if not groups or #groups == 0 then
    return
  end
  for i, g in ipairs(groups) do
    local tenant = g.tenant
    if g.attempt and tenant then
      emit_ids(x.events, x.cap, g.ids, g.event, 'type', g.mtype, 'attempt', g.attempt, 'tenant', tenant)
    elseif g.attempt then
      emit_ids(x.events, x.cap, g.ids, g.event, 'type', g.mtype, 'attempt', g.attempt)
    elseif tenant then
      emit_ids(x.events, x.cap, g.ids, g.event, 'type', g.mtype, 'tenant', tenant)
    else
      emit_ids(x.events, x.cap, g.ids, g.event, 'type', g.mtype)
    end
    groups[i] = nil
  end
  x.groups, x.last = {}, nil
end
local function exit_gather(x, event, mtype, attempt, id, tenant)
  local g = x.last  -- (a batch's tasks mostly share their group: no key built for them)
  if not (g and g.event == event and g.mtype == mtype and g.attempt == attempt and g.tenant == tenant) then
    local groups = x.groups
    if not groups then
      groups = {}
      x.groups = groups
    end
    local k = event .. '\n' .. mtype .. '\n' .. (attempt or '') .. '\n' .. (tenant or '')
    g = groups[k]
    if not g then
      g = {event = event, mtype = mtype, attempt = attempt, tenant = tenant, ids = {}, n = 0}
      groups[k] = g
      x.batch[#x.batch + 1] = g
    end
    x.last = g
  end
  g.n = g.n + 1
  g.ids[g.n] = id
end
