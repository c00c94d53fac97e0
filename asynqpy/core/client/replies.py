"""What the Client's sends come back as (sans I/O): :class:`TaskInfoList` (an ``enqueue_many``'s
tasks, each read from its reply when first used), the tracing of one send, and the reading of a
batch's replies (a refused task, a duplicate, a conflict). The plans that send are :mod:`.plans`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..model import kinds
from ..model import options as opts
from ..model.errors import (
    TaskIdConflictError,
)
from ..model.task import TaskInfo
from ..spine import tracing

_SAME_ID = (-1, -3)
"""Where a batch's task whose id an earlier task of the batch has (same queue) goes: nowhere; it is
refused with TaskIdConflictError."""


class TaskInfoList(Sequence[Any]):
    """What enqueue_many returns: per task, in order, its :class:`TaskInfo` (or, with
    ``return_exceptions``, the exception that refused it). TaskInfo objects are built on access."""

    __slots__ = ("_prepared", "_outcomes")

    def __init__(self, prepared: list[opts.Prepared], outcomes: list[Any]) -> None:
        self._prepared = prepared
        self._outcomes = outcomes

    def __len__(self) -> int:
        return len(self._prepared)

    def _one(self, i: int) -> Any:
        r = self._outcomes[i]
        if isinstance(r, Exception):
            return r
        p = self._prepared[i]
        state = kinds.first_state(p.kind, r)
        if isinstance(r, tuple):  # debounced: (due, the task replaced)
            return replace(TaskInfo.from_message(p.id, p.queue, state, p.msg, r[0]), replaced=r[1])
        return TaskInfo.from_message(p.id, p.queue, state, p.msg, r if p.delay_ms > 0 else 0)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(len(self)))]
        return self._one(range(len(self))[i])

    @property
    def ids(self) -> list[str]:
        """The task ids, in order (cheaper than building every TaskInfo)."""
        return [p.id for p in self._prepared]

    def __add__(self, other: Sequence[Any]) -> list[Any]:
        return list(self) + list(other)

    def __radd__(self, other: Sequence[Any]) -> list[Any]:
        return list(other) + list(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TaskInfoList({len(self)} tasks)"


class _Sending:
    """A producer span around an enqueue (or a batch) while tracing is on; nothing otherwise. The
    span's trace context goes into ``options``'s headers (unless they are not a mapping: the
    enqueue then refuses them as usual); the span ends with the task id or the batch's size, or
    the error."""

    def __init__(self, task_type: str, options: dict[str, Any]) -> None:
        self.tracer = tracing.current
        self.task_id: str | None = None
        self.count = 1
        self.span: Any = None
        if self.tracer is not None:
            queue, headers = str(options.get("queue", "default")), options.get("headers")
            if headers is None or isinstance(headers, Mapping):
                self.span, options["headers"] = self.tracer.send(queue, task_type,
                                                                 dict(headers) if headers is not None else None)
            else:
                self.span, _ = self.tracer.send(queue, task_type, None)

    def __enter__(self) -> _Sending:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        if self.tracer is not None:
            self.tracer.sent(self.span, self.task_id, error, self.count)


def _outcome(p: opts.Prepared, ci: int, pos: int, replies: list[Any], refused: dict[int, set[Any]]) -> Any:
    """The outcome of one task of a plan: where it went (call ``ci``, position ``pos``: see
    :meth:`ClientPlans._plan`) read in the replies."""
    if (ci, pos) == _SAME_ID:
        return TaskIdConflictError(f"task id {p.id!r} is given twice in this batch (queue {p.queue!r})")
    if pos <= -2:  # a keyed batch: the reply per task
        return _keyed(replies[ci], -2 - pos)
    return replies[ci] if pos < 0 else _batched(p, replies[ci], pos in refused.get(ci, ()))


def _batched(p: opts.Prepared, reply: Any, refused: bool) -> Any:
    """The outcome of one task of a batch call: refused for its id, the call's error (NotReplicatedError
    too) for each of its tasks, else stored (0)."""
    if refused:
        return TaskIdConflictError(f"a live task with id {p.id!r} exists in queue {p.queue!r}")
    return reply if isinstance(reply, Exception) else 0


def _keyed(reply: Any, pos: int) -> Any:
    """The outcome of one task of a keyed batch call: its state or refusal, or the call's error
    (NotReplicatedError: the replies it carries)."""
    if isinstance(reply, Exception):
        result = getattr(reply, "result", None)
        if isinstance(result, list):
            return result[pos] if isinstance(result[pos], Exception) else reply
        return reply
    return reply[pos]


def _raise_any(replies: list[Any]) -> None:
    for r in replies:
        if isinstance(r, Exception):
            raise r


def _one(replies: list[Any]) -> Any:
    if isinstance(replies[0], Exception):
        raise replies[0]
    return replies[0]
