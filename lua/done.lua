--[[ done: active -> (deleted), for a batch of tasks of one queue
Handlers succeeded and the tasks keep no result (retention 0): delete each task the caller still
holds, release its uniqueness lock, push its outcome to the inbox of a client waiting through
Client.call, and count the batch as processed. A worker acknowledges every such task that finished
since its last write in one call (one script per queue per batch); a batch of one is the single
case. A task the caller no longer holds is left untouched (its code says why); the others proceed.
Events: one 'completed' entry per type and attempt for the batch (ids listed), and one 'enqueued'
entry for the keys' next tasks (includes/exit ``batch``), not an XADD per task.
KEY tasks              tasks hash
KEY lease              lease zset
KEY processed          lifetime processed counter
KEY processed_day      today's processed counter
KEY progress           progress hash (the tasks' entries are cleared)
KEY watch              watch hash: id -> inbox ids of late waiters
KEY @exit
KEY deps               deps hash: a child's record (its parents' results), deleted with the task
KEY extra...           the uniqueness locks, waiting clients' inboxes and keys' lists of the batch,
                       named by index j from ARGV: K.extra[j] (only tasks that have one)
ARG day_ttl            seconds to keep a daily counter
ARG plain              how many of the items come first, in the short form: tasks with no lock, no
                       waiting client, no progress written, no result and no key (the usual
                       no-op success: 3 arguments instead of 10, and includes/exit exit_plain)
ARG items...     ``plain`` groups of 3 (id, token, attempt), then one group of 10 per other task:
        id
        token          the lease token the task was dequeued with
        attempt        the attempt's number (for the event)
        lock           index j of the task's uniqueness lock in K.extra[j], 0 = not unique
        reply          index j of the waiting client's inbox in K.extra[j], 0 = nobody waits
        payload        the outcome for that client (msgpack [id, 'c', result]), '' = none
        progressed     1 = the run wrote progress (its entry is cleared), 0 = it did not (an
                       attempt starts with no entry: every script that ends one clears it)
        result         the handler's result (msgpack; '' = None), for the task's children
        keylist        index j of the task's key's list in K.extra[j], 0 = no key
        key            the task's key ('' = none): released to the next task of the key
Returns the number of items when every one's code is 1 (the usual batch: no list built), else
one code per task, in the items' order: 1 = done (or a string: done, and the inbox ids of late
waiters to notify, with the token '!' if tasks waiting on it were told: includes/flow),
0 = no such task, -3 = the caller no longer holds the lease (write refused).
]]
--- @include "ack"
return ack_done()
