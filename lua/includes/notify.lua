--- notify(watch, reply, id, payload): the end of a finishing script (complete, archive,
--- proc_commit; its progress is cleared by includes/exit). Pushes the outcome (payload, built by the worker) to the
--- inbox of the client that enqueued it with Client.call (reply_to; payload '' = nobody); returns
--- the inbox ids (space-separated) of waiters that started waiting after the enqueue (the watch
--- hash), which the worker notifies right after with the reply script (their inboxes were not
--- known when the call was built, so they cannot be among its KEYS), or 1 when there are none.
local INBOX_TTL_MS = 600000
local function notify(watch, reply, id, payload)
  if payload ~= '' then
    redis.call('RPUSH', reply, payload)
    redis.call('PEXPIRE', reply, INBOX_TTL_MS)
  end
  local late = redis.call('HGET', watch, id)
  if late then
    redis.call('HDEL', watch, id)
    return late
  end
  return 1
end
