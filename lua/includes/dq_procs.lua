--- The dequeue's process reads (lua/dequeue.lua; docs/internals-scripts.md "The dequeue, in stages"),
--- for a worker that runs durable processes (A.pages >= 0, the most events its process types
--- read): each process input taken (type 'process:...', key 'proc:<process id>') comes with its
--- process's record and its last A.pages events, read as lua/proc_read.lua reads them
--- (includes/proc_page), so the input's handler needs no read of its own (the input holds its
--- process's key: no other input of it runs meanwhile; its commit checks the record it read). The
--- reply then ends with one more element: a list of {input id, process id} (no such process) or
--- {input id, process id, record, first event id, event, ...}. One HMGET of the records, one of
--- each process's page; nothing at all for a worker of no process type (A.pages = -1), nor when
--- no process input was taken. Reads only: after the lease, before the reply.
do
  local pages, out = tonumber(A.pages) or -1, s.out
  if pages >= 0 and #out > 3 then
    local ins, pids = {}, {}
    for i = 4, #out, 2 do
      local m = out[i + 1]
      if string.find(msg_type(m), 'process:', 1, true) == 1 then
        local at = msg_field(m, 1, F.key)
        local b = at and string.byte(m, at)
        local key = false
        if b and b >= 0xa0 and b <= 0xbf then  -- fixstr
          key = string.sub(m, at + 1, at + b - 0xa0)
        elseif b == 0xd9 then  -- str8
          key = string.sub(m, at + 2, at + 1 + string.byte(m, at + 1))
        end
        if key and #key > 5 and string.find(key, 'proc:', 1, true) == 1 then
          ins[#ins + 1], pids[#pids + 1] = out[i], string.sub(key, 6)
        end
      end
    end
    if #pids > 0 then
--- @include "proc_page"
      local raws = redis.call('HMGET', K.proc, unpack(pids))
      local reads = {}
      for k, pid in ipairs(pids) do
        local one = {ins[k], pid}
        if raws[k] then
          for j, v in ipairs(proc_page(K.hist, pid, raws[k], 0, pages, 0)) do
            one[j + 2] = v
          end
        end
        reads[k] = one
      end
      out[#out + 1] = reads
    end
  end
end
