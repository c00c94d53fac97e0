"""Deploy holds, the calls (docs/deploy.md "Holding tasks during a deploy"; the design in
:mod:`asynqpy.core.deploy.versions`): block and unblock a task type in a queue (lua/hold.lua)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model.errors import InvalidArgumentError
from ..model.options import check_type
from ..spine.broker import Call, pending_keys, script_call
from ..spine.keys import queue_keys

UNBLOCK_BATCH = 500
"""Held tasks one unblock call reads (the Inspector calls again until the band is read)."""


def check_type_name(task_type: str) -> str:
    """A task type to block: a valid task type with no NUL byte (the queue's list of blocked
    types is NUL-delimited). Raises InvalidArgumentError."""
    check_type(task_type)
    if "\0" in task_type:
        raise InvalidArgumentError(f"a task type to block has no NUL byte, got {task_type!r}")
    return task_type


@dataclass(frozen=True)
class HoldReply:
    """One call of lua/hold.lua: ``moved`` tasks put back, the ``offset`` for the next call,
    ``more`` when the band may hold more to read, and the queue's ``blocked`` types."""

    moved: int
    offset: int
    more: bool
    blocked: list[str]


def hold_call(queue: str, action: str, task_type: str = "", offset: int = 0,
              batch: int = UNBLOCK_BATCH) -> Call[HoldReply]:
    """The call of lua/hold.lua: ``action`` 'block', 'unblock' or 'list'."""
    q = queue_keys(queue)

    def parse(r: list[Any]) -> HoldReply:
        return HoldReply(int(r[0]), int(r[1]), bool(int(r[2])),
                         [x.decode(errors="replace") if isinstance(x, bytes) else str(x) for x in r[3:]])

    return script_call("hold", parse, conf=q.conf, scheduled=q.scheduled, tasks=q.tasks, wake=q.wake,
                       **pending_keys(q), action=action, type=task_type, batch=batch, offset=offset)
