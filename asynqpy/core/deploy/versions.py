"""Deploy holds (docs/deploy.md "Holding tasks during a deploy"): a blocked task type, and a
version gate. Sans-I/O: the version encoding and the score bands of held tasks.

A held task waits in its queue's scheduled zset, in state 's', at a score above any time a task
may be scheduled for (:data:`HOLD_FLOOR`, year 33658; times are capped at year 9999): the
forwarder never reaches it, and every operator action on a scheduled task (delete, archive,
cancel, edit, run now) works on it unchanged. Two bands:

- :data:`VERSION_BAND` + the version the task needs (``min_worker_version=``): a worker of an
  older version that dequeued it set it aside; a worker of that version or newer takes it back
  to the front of the pending tasks in its next dequeue (lua/includes/hold.lua).
- :data:`TYPE_BAND` + a count of the tasks held so (the queue's conf field 'hseq'): its type is
  blocked in the queue
  (``Inspector.block_type``); ``unblock_type`` puts the type's held tasks back at the front of
  the pending tasks, the oldest held first.

The calls that block and unblock are in :mod:`asynqpy.core.deploy.holds`.
"""

from __future__ import annotations

import re

from ..model.errors import InvalidArgumentError

HOLD_FLOOR = 10**15
"""Scores at or above this (ms) in a scheduled zset are held tasks, not due times."""
VERSION_BAND = 10**15
"""A task set aside for a newer worker: this + the version it needs (:func:`encode_version`)."""
TYPE_BAND = 2 * 10**15
"""A task of a blocked type: this + the count of tasks held so in its queue (their order)."""
PART_MAX = 9999
_VERSION = re.compile(r"^v?(\d{1,4})(?:\.(\d{1,4}))?(?:\.(\d{1,4}))?$")


def encode_version(text: str) -> int:
    """``"MAJOR[.MINOR[.PATCH]]"`` (each 0 to 9999, an optional leading ``v``) as one ordered
    integer: major * 10^8 + minor * 10^4 + patch. Raises InvalidArgumentError for anything else
    (a pre-release or build suffix included: a gate compares plain numbers)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"a version is a string like '2.4.1', got {type(text).__name__}")
    m = _VERSION.match(text.strip())
    if not m:
        raise InvalidArgumentError(f"a version is MAJOR[.MINOR[.PATCH]], numbers of 0 to {PART_MAX} (like "
                                   f"'2.4.1'), got {text!r}")
    major, minor, patch = (int(g or 0) for g in m.groups())
    return major * 10**8 + minor * 10**4 + patch


def format_version(encoded: int) -> str:
    """The text of an encoded version ('' for 0, no version)."""
    if encoded < 1:
        return ""
    return f"{encoded // 10**8}.{encoded // 10**4 % 10**4}.{encoded % 10**4}"


def held_kind(score: float) -> str:
    """What holds a scheduled task at ``score``: "type" (its type is blocked), "version" (it waits
    for a newer worker) or "" (a due time: not held)."""
    if score >= TYPE_BAND:
        return "type"
    if score >= VERSION_BAND:
        return "version"
    return ""
