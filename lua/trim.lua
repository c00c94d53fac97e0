--[[ trim: archived -> (deleted) past the archive's size or age limit (the janitor; archive does
the same on every write). Trimmed tasks' data is deleted too. At most 100 tasks per call.
KEY archived      archived zset: id -> time archived (ms)
KEY tasks         tasks hash
KEY trimmed       lifetime count of archived tasks deleted by the limits (increased here)
ARG max_size      archive size limit (tasks)
ARG max_age       archive age limit (ms)
ARG now           '' = Redis time; else a simulated time in ms
Returns the number of tasks deleted.
]]
--- @include "now"
--- @include "trim"
return trim_archive(K.archived, K.tasks, K.trimmed, now_ms(A.now), tonumber(A.max_size), tonumber(A.max_age))
