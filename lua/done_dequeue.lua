--[[ done_dequeue: done.lua, then dequeue.lua, in one call (a busy worker's acknowledgement of the
tasks that finished since its last write and its next dequeue of the same queue: one round trip,
one script call, where the two scripts took two). The acknowledgement is done.lua's
(includes/ack: the same checks, writes and events, its batch first); the dequeue is dequeue.lua's
five stages (includes/dq_*), run after it, so the slots the acknowledged tasks freed count for the
queue's concurrency limit. Each part is what its own script does: sent again after a lost reply,
the acknowledgement finds its tasks gone (code 0, as done.lua sent again) and the dequeue takes
more tasks under a new token (the tasks of the lost reply expire and run again, as after a lost
dequeue reply).
KEY tasks              tasks hash
KEY lease              lease zset
KEY processed          lifetime processed counter
KEY processed_day      today's processed counter
KEY progress           progress hash (the tasks' entries are cleared)
KEY watch              watch hash: id -> inbox ids of late waiters
KEY @exit
KEY deps               deps hash: a child's record (its parents' results), deleted with the task
KEY paused             paused flag (exists = paused)
KEY runs               runs hash: targeted task id -> record (includes/runs)
KEY mine               index of the targeted tasks naming the caller ('m:w:<name>')
KEY targeted_any       index of the targeted tasks any worker may run ('m:*')
KEY scheduled          scheduled zset (held tasks wait there: includes/hold)
KEY tw                 the queue's tenants held by their rate (includes/priority)
KEY proc               proc hash (includes/dq_procs)
KEY hist               hist hash
KEY extra...           the acknowledgement's locks, inboxes and keys' lists (done.lua)
ARG count              the dequeue's arguments (dequeue.lua) ...
ARG lease_ms
ARG token
ARG now
ARG name
ARG version
ARG pages
ARG day_ttl            ... then the acknowledgement's (done.lua)
ARG plain
ARG items...
Returns {done.lua's reply, dequeue.lua's reply}.
]]
--- @include "now"
--- @include "signal"
--- @include "events"
--- @include "priority"
--- @include "runs"
--- @include "stored"
--- @include "hold"
--- @include "ack"
local acked = ack_done()
--- @include "dq_gate"
--- @include "dq_limits"
--- @include "dq_take"
--- @include "dq_lease"
--- @include "dq_account"
--- @include "dq_procs"
--- @include "dq_reply"
