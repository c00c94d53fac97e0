--- The score bands of a queue's scheduled zset (core/deploy/versions.py, the same numbers: a test compares;
--- docs/internals-scripts.md "Bands and sentinels"): a due time (ms) is below HOLD_FLOOR (year 33658;
--- an option's time stops at year 9999, a delay at 100 years: core/model/options.py, core/spine/broker.py
--- MAX_DELAY_MS); a task held by a deploy hold (includes/hold) is at VERSION_BAND + the version it
--- needs (at most VERSION_MAX: a message's larger need, never encoded, is held at the top of the
--- band), or TYPE_BAND + its count among the held of a blocked type (hseq only grows: above every
--- other band, exact for 7 * 10^15 holds).
--- A due time a script is about to write at or past HOLD_FLOOR (it would read as a held task,
--- never due) is refused: ``if due >= HOLD_FLOOR then return error(DUE_REFUSED) end`` before the
--- script's first write (nothing is changed), raised to the caller as InvalidArgumentError
--- (core/model/errors.py SCRIPT_REFUSED). (A check in place, not a function: a script's functions are
--- made again on every call of it.)
local HOLD_FLOOR = 1e15  -- core/deploy/versions.py HOLD_FLOOR
local VERSION_BAND = 1e15  -- core/deploy/versions.py VERSION_BAND
local TYPE_BAND = 2e15  -- core/deploy/versions.py TYPE_BAND
local VERSION_MAX = 999999999999  -- core/deploy/versions.py encode_version('9999.9999.9999'): VERSION_BAND's top
local DUE_REFUSED = 'asynqpy-refused: a due time at or past HOLD_FLOOR (1e15 ms: the held tasks\' band of the '
  .. 'scheduled zset)'
