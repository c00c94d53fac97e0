--- Targeted tasks (``workers=``, ``runs=``): a task (state 'm') that named workers, or several
--- distinct workers, each run once. The task waits in the queue's 'targeted' zset and in the
--- index zsets workers look in ('m:*' when any worker may run it, else 'm:w:<name>' per allowed
--- name). A worker that takes a run of it gets a run task of its own, id '<task id>|<worker
--- name>', an ordinary active task (lease, heartbeat, recovery) whose end (run_end) updates the
--- task's record in the 'runs' hash:
---   "<runs> <allowed> <failures> name=state:ms name=state:ms ..."
--- runs: how many distinct workers must succeed; allowed: '*' or the names joined by ',';
--- failures: runs that failed or whose lease expired so far (the task's retries); state: r
--- running, s succeeded, f failed, e lease expired. A worker runs a task at most once, but for
--- a run whose lease expired (it crashed or stalled: as a new process it may take a run again).
--- Names hold none of ' ', '=', ',', '|' (the client checks them).
local RUN_SCAN = 64  -- index entries a worker looks at per index and dequeue
local function rec_parse(rec)
  local n, allowed, failures, rest = string.match(rec or '', '^(%d+) (%S+) (%d+)(.*)$')
  local states, order = {}, {}
  for name, st, ms in string.gmatch(rest or '', ' ([^=%s]+)=(%a):(%d+)') do
    if not states[name] then
      order[#order + 1] = name
    end
    states[name] = {st, ms}
  end
  return {n = tonumber(n) or 1, allowed = allowed or '*', failures = tonumber(failures) or 0,
          states = states, order = order}
end
local function rec_build(r)
  local parts = {tostring(r.n), r.allowed, tostring(r.failures)}
  for _, name in ipairs(r.order) do
    local s = r.states[name]
    if s then
      parts[#parts + 1] = name .. '=' .. s[1] .. ':' .. s[2]
    end
  end
  return table.concat(parts, ' ')
end
local function rec_allows(r, name)
  return r.allowed == '*' or string.find(',' .. r.allowed .. ',', ',' .. name .. ',', 1, true) ~= nil
end
local function rec_count(r, st)
  local c = 0
  for _, s in pairs(r.states) do
    if s[1] == st then
      c = c + 1
    end
  end
  return c
end
--- run_parts(id): a run task's id -> the targeted task's id and the worker's name (nil: not a run)
local function run_parts(id)
  return string.match(id, '^(.*)|([^|]+)$')
end
