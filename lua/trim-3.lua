--[[ trim: archived -> (deleted) past the archive's size or age limit (the janitor; archive does
the same on every write). Trimmed tasks' data is deleted too. At most 100 tasks per call.
KEYS[1] archived  archived zset: id -> time archived (ms)
KEYS[2] tasks     tasks hash
KEYS[3] trimmed   lifetime count of archived tasks deleted by the limits (increased here)
ARGV[1] max_size  archive size limit (tasks)
ARGV[2] max_age   archive age limit (ms)
ARGV[3] now       '' = Redis time; else a simulated time in ms
Returns the number of tasks deleted.
]]
--- @include "now"
--- @include "trim"
return trim_archive(KEYS[1], KEYS[2], KEYS[3], now_ms(ARGV[3]), tonumber(ARGV[1]), tonumber(ARGV[2]))
