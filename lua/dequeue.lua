--[[ dequeue: pending -> active (with a lease)
Takes up to `count` tasks and leases them to the caller until now + lease, in five stages, each an
include (a block of this body, in order) that reads and writes one state table ``s``
(docs/internals-scripts.md "The dequeue, in stages"):
  gate     includes/dq_gate     a paused queue yields nothing; the settings read once (type blocks,
                                limits, events), the caller's version
  take     includes/dq_take     first runs of targeted tasks, take-backs of tasks held for the
                                caller's version, then pending tasks: in turns across the tenants
                                (includes/dq_fair) or the plain priority order (includes/dq_plain)
  lease    includes/dq_lease    the tasks taken become active under the caller's token (a task the
                                gate holds goes to the scheduled zset instead: includes/hold)
  account  includes/dq_limits   the queue's limits (concurrency, rate) admitted before the take,
           includes/dq_account  and settled after the lease (the rate's waiter), with what is left;
                                the tenants' slots and rates: in the fair take (includes/dq_tenant)
  procs    includes/dq_procs    a process input's process (record and page), for a worker of
                                process types
  reply    includes/dq_reply    the reply, and a wake-up token when tasks remain
KEY tasks        tasks hash
KEY @pending
KEY lease        lease zset: id -> lease expiry (ms, Redis clock)
KEY paused       paused flag (exists = paused)
KEY wake         wake-up list
KEY @events      (conf's fields 'active' and 'followed': whether 'active' events are written,
                 includes/events active_wanted)
KEY runs         runs hash: targeted task id -> record (includes/runs)
KEY mine         index of the targeted tasks naming the caller ('m:w:<name>')
KEY targeted_any       index of the targeted tasks any worker may run ('m:*')
KEY scheduled       scheduled zset (held tasks wait there: includes/hold)
KEY tw       the queue's tenants held by their rate: tenant -> ms its next task conforms (includes/priority)
KEY proc         proc hash: process id -> record (includes/dq_procs)
KEY hist         hist hash: '<process id>:<n>' -> event
ARG count        how many tasks at most
ARG lease_ms      lease duration in ms
ARG token        8-character lease token; the worker proves ownership with it later
ARG now          '' = Redis time; else a simulated time in ms
ARG name         the caller's worker name ('' = take no runs of targeted tasks)
ARG version      the caller's version (core/deploy/versions.py encode_version; 0 = none)
ARG pages        -1 = no process reads; else the process inputs taken come with their process's
                 record and this many of its last events (includes/dq_procs)
Returns {now, remaining, wait, id1, msg1, id2, msg2, ...} (a run's id is '<task id>|<name>', its
message the task's); remaining (pending tasks left; runs of targeted tasks are not counted) = -1
when the queue is paused; wait = 0, or ms before a dequeue may get a task (includes/dq_limits,
includes/dq_tenant; negative: sleep on the wake list unless woken sooner); then, when process
inputs were taken with A.pages >= 0, one more element: their processes (includes/dq_procs).
]]
--- @include "now"
--- @include "signal"
--- @include "events"
--- @include "priority"
--- @include "runs"
--- @include "stored"
--- @include "hold"
local acked = false  -- (lua/done_dequeue.lua: the acknowledgement's reply, which goes first in the reply)
--- @include "dq_gate"
--- @include "dq_limits"
--- @include "dq_take"
--- @include "dq_lease"
--- @include "dq_account"
--- @include "dq_procs"
--- @include "dq_reply"
