--- Task events written together (key_gate, forward: the events of a batch of tasks).
--- ev_batch(): a batch of task events to write together; ev_batch_add(b, event, id, type, tenant)
--- adds one (tenant '' = none); ev_batch_emit(stream, cap, b) writes them, those of one event,
--- type and tenant as entries of many ids (emit_ids), an id that cannot be listed on its own.
--- @include "events"
local function ev_batch()
  return {groups = {}, order = {}}
end
local function ev_batch_add(b, event, id, ty, tenant)
  local g = event .. '\0' .. ty .. '\0' .. tenant
  local e = b.groups[g]
  if e then
    e.ids[#e.ids + 1] = id
  else
    b.groups[g] = {ids = {id}, event = event, type = ty, tenant = tenant}
    b.order[#b.order + 1] = g
  end
end
local function ev_batch_emit(stream, cap, b)
  for _, g in ipairs(b.order) do
    local e = b.groups[g]
    local listed, alone = {}, {}
    for _, id in ipairs(e.ids) do
      if ids_ok(id) then listed[#listed + 1] = id else alone[#alone + 1] = id end
    end
    local tail = e.tenant ~= '' and {'type', e.type, 'tenant', e.tenant} or {'type', e.type}
    emit_ids(stream, cap, listed, e.event, unpack(tail))
    for _, id in ipairs(alone) do  -- (an id with a space cannot go in a list of ids)
      emit(stream, cap, 'e', e.event, 'id', id, unpack(tail))
    end
  end
end
