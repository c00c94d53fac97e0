--[[ rules_dead: taken list -> dead list: an event its rules could not handle, with the reason
KEY taken        the watcher's taken list (the event leaves it: removal first, so this works on a
                 full Redis)
KEY dead         the watcher's dead list (LPUSH of a JSON record: event, reason, rule, watcher, time)
ARG event        the event
ARG record       the record pushed to the dead list
Returns 1 = moved, 0 = the event was not in the taken list (another pass handled it): nothing written.
]]
if redis.call('LREM', K.taken, 1, A.event) == 0 then
  return 0
end
redis.call('LPUSH', K.dead, A.record)
return 1
