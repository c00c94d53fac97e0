--[[ rules_dead: taken list -> dead list: an event its rules could not handle, with the reason
KEYS[1] taken    the watcher's taken list (the event leaves it: removal first, so this works on a
                 full Redis)
KEYS[2] dead     the watcher's dead list (LPUSH of a JSON record: event, reason, rule, watcher, time)
ARGV[1] event    the event
ARGV[2] record   the record pushed to the dead list
Returns 1 = moved, 0 = the event was not in the taken list (another pass handled it): nothing written.
]]
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('LPUSH', KEYS[2], ARGV[2])
return 1
