--[[ watch: (any state) -> (unchanged); registers a waiter
A client waits for a task's outcome (Client.result, or a recheck of Client.call's wait). Reads the
task and, if it has not finished, adds the client's inbox id to the task's entry of the watch hash
(once), so the script that finishes it hands the inbox to the worker, which pushes the outcome
there. Reading and registering in one script: a task cannot finish between the two unseen.
KEY tasks              tasks hash
KEY watch              watch hash: id -> space-separated inbox ids
ARG id
ARG inbox              the waiter's inbox id; '' = only read (the waiter is known to the task already)
Returns 0 = no such task; the stored value ('c' or 'x' + message) = finished (completed with its
result, or archived with its error); 1 = not finished (registered when ``inbox`` is not '').
]]
--- @include "stored"
--- @include "waiter"
local id = A.id
local v = redis.call('HGET', K.tasks, id)
if not v then
  return 0
end
local state = stored_state(v)
if state == 'c' or state == 'x' then
  return v
end
if A.inbox ~= '' then
  add_waiter(K.watch, id, A.inbox)
end
return 1
