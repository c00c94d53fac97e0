--[[ rules_redrive: dead list -> input list: dead events sent through their rules again (oldest first)
KEY dead         the watcher's dead list (JSON records with the field 'event', from rules_dead; an
                 event that is not UTF-8 text also has 'event_hex', its bytes in hex: those are moved)
KEY input        the watcher's input list
ARG n            the most events to move
Returns how many moved (a record that is not such JSON stays in the dead list, and the move stops
there: the count is then the number before it).
]]
local moved = 0
for _ = 1, tonumber(A.n) do
  local rec = redis.call('LINDEX', K.dead, -1)
  if not rec then
    break
  end
  local ok, parsed = pcall(cjson.decode, rec)
  if not ok or type(parsed) ~= 'table' or type(parsed.event) ~= 'string' then
    break
  end
  local event = parsed.event
  local hex = parsed.event_hex
  if hex ~= nil then
    if type(hex) ~= 'string' or #hex % 2 ~= 0 or string.find(hex, '[^0-9a-fA-F]') then
      break
    end
    event = string.gsub(hex, '%x%x', function(h) return string.char(tonumber(h, 16)) end)
  end
  redis.call('RPOP', K.dead)
  redis.call('LPUSH', K.input, event)
  moved = moved + 1
end
return moved
