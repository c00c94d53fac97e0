--- operator_only(key): call first in a script only an operator (the inspector role) or a worker
--- runs. EXISTS reads and changes nothing, and the producer role of the minimal ACL (docs/security.md) does
--- not hold it: Redis then refuses the whole script to a producer here, before it writes anything
--- (Redis checks each command a script runs against the caller's ACL, not which script runs, so a
--- script made only of producing commands would otherwise be open to a producer, and one refused
--- half-way would leave its first writes done).
local function operator_only(key)
  redis.call('EXISTS', key)
end
