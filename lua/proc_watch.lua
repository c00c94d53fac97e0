--[[ proc_watch: (any state) -> (unchanged); registers a waiter of a process (a durable run's result)
A client waiting for a durable run to end (Client.result of a DurableRun) adds its inbox id to the
process's entry of the pwatch hash (once), then reads the process (proc_read, pipelined behind
this call, so a commit between the two cannot go unseen). The next proc_commit of an input of
the process (or its archive: the process then in error) hands the inboxes to the worker, which
pushes a wake-up to each (the entry is deleted then): the waiter reads the run again and
registers again if it has not ended. The recheck of the client's inbox calls this again (every
RECHECK seconds of silence): a wake-up lost to a crash, or a run deleted by hand, costs at most that.
KEY proc               proc hash: process id -> record (includes/process)
KEY pwatch             pwatch hash: process id -> space-separated inbox ids of waiting clients
ARG pid                the process id
ARG inbox              the waiter's inbox id
Returns 0 = no such process (nothing registered); 1 = registered (or already).
]]
--- @include "waiter"
local pid = A.pid
if redis.call('HEXISTS', K.proc, pid) == 0 then
  return 0
end
add_waiter(K.pwatch, pid, A.inbox)
return 1
