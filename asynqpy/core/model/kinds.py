"""What kind of task an enqueue makes, decided once, and what each kind means (sans-I/O).

:func:`decide` reads a validated task's options (:func:`asynqpy.core.model.options.prepare` calls it
and keeps the answer as ``Prepared.kind``); :data:`ROUTES` says, per kind, the options that make
it, the broker call that stores it, the state it starts in, and the options it refuses beyond
those the option table's conflicts already refuse (:func:`asynqpy.core.model.options.allowed` gives
the options each kind takes). The client dispatches through :func:`store_call`; nothing else asks
again whether a task is scheduled, grouped, keyed, targeted or waiting.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..processes.model import KEY_PREFIX, TYPE_PREFIX
from ..spine.broker import Broker, Call
from .codec import Message
from .errors import InvalidArgumentError
from .task import TaskState


class TaskKind(enum.Enum):
    """What kind of task an enqueue makes (one per task, decided by :func:`decide`)."""

    PLAIN = "plain"
    """Pending at once, any worker (the only kind ``enqueue_many`` sends 1000 to a call)."""
    SCHEDULED = "scheduled"
    """Due later (``process_at``/``process_in``)."""
    DEBOUNCED = "debounced"
    """Due later, replacing a waiting task with its key (``debounce``)."""
    GROUPED = "grouped"
    """Waits in an aggregation group (``group``)."""
    KEYED = "keyed"
    """Runs one at a time with the queue's other tasks of its key (``key``)."""
    PROCESS_INPUT = "process input"
    """An input of a durable process: a keyed task (``process:<type>``, key ``proc:<id>``)."""
    TARGETED = "targeted"
    """Run by named workers, or by several (``workers``/``runs``)."""
    WAITING = "waiting"
    """Waits for its parents (``after``)."""


class Storable(Protocol):
    """What a store call reads of a prepared task (:class:`asynqpy.core.model.options.Prepared`)."""

    queue: str
    id: str
    delay_ms: int
    unique_ttl: int
    data: bytes
    generated_id: bool
    keep_finished: bool
    mode: str

    @property
    def msg(self) -> Message: ...


Store = Callable[[Broker, Any], Call[Any]]
"""Builds the broker call that stores a prepared task of a kind."""


def _schedule(b: Broker, p: Storable) -> Call[Any]:
    return b.schedule(p.queue, p.id, p.msg, p.delay_ms, p.unique_ttl, p.data, not p.generated_id, p.mode)


def _group_add(b: Broker, p: Storable) -> Call[Any]:
    return b.group_add(p.queue, p.id, p.msg, p.unique_ttl, p.data, not p.generated_id, p.mode)


def _enqueue_keyed(b: Broker, p: Storable) -> Call[Any]:
    return b.enqueue_keyed(p.queue, p.id, p.msg, p.data, not p.generated_id, p.keep_finished)


def _enqueue_target(b: Broker, p: Storable) -> Call[Any]:
    return b.enqueue_target(p.queue, p.id, p.msg, p.unique_ttl, p.data, not p.generated_id)


def _enqueue(b: Broker, p: Storable) -> Call[Any]:
    return b.enqueue(p.queue, p.id, p.msg, p.unique_ttl, p.data, not p.generated_id, p.mode)


def _no_single_call(b: Broker, p: Storable) -> Call[Any]:
    raise InvalidArgumentError("enqueue_many does not take after=: enqueue each task that waits on "
                               "parents with enqueue (or use chain/group)")


_KEYED_UNIQUE = "key= (serial execution) cannot be combined with unique yet"


@dataclass(frozen=True)
class Route:
    """What a kind means: ``by``, the options that make a task this kind (any of them);
    ``store``, the broker call that stores it (``call``: that Broker method's name); ``state``,
    the state it starts in (a keyed task's call answers PENDING or BLOCKED); ``refuses``, the
    options it refuses beyond those that conflict with ``by`` in the option table, and
    ``refusal``, the message then; ``takes``, where set, the only options a caller gives (the
    others are set for it: a process input's key, id and timing are its process's)."""

    by: tuple[str, ...]
    call: str
    store: Store
    state: TaskState
    refuses: frozenset[str] = frozenset()
    refusal: str = ""
    takes: frozenset[str] | None = None


ROUTES: dict[TaskKind, Route] = {
    TaskKind.PLAIN: Route((), "enqueue", _enqueue, TaskState.PENDING),
    TaskKind.SCHEDULED: Route(("process_at", "process_in"), "schedule", _schedule, TaskState.SCHEDULED),
    TaskKind.DEBOUNCED: Route(("debounce",), "schedule", _schedule, TaskState.SCHEDULED),
    TaskKind.GROUPED: Route(("group",), "group_add", _group_add, TaskState.AGGREGATING),
    TaskKind.KEYED: Route(("key",), "enqueue_keyed", _enqueue_keyed, TaskState.PENDING,
                          frozenset({"unique", "unique_key"}), _KEYED_UNIQUE),
    TaskKind.PROCESS_INPUT: Route(("key",), "enqueue_keyed", _enqueue_keyed, TaskState.PENDING,
                                  frozenset({"unique", "unique_key"}), _KEYED_UNIQUE,
                                  frozenset({"queue", "max_retry", "timeout", "retention", "retry_delay", "headers",
                                             "priority", "tenant", "min_worker_version"})),
    TaskKind.TARGETED: Route(("workers", "runs"), "enqueue_target", _enqueue_target, TaskState.TARGETED),
    # stored by a plan (flows.enqueue_after: the parents first), never by one call
    TaskKind.WAITING: Route(("after",), "enqueue_after", _no_single_call, TaskState.WAITING),
}
"""Per kind: the options that make it, its broker call, its first state, what it refuses."""


def decide(task_type: str, *, waiting: bool, delay_ms: int, debounced: bool, grouped: bool, key: str,
           targeted: bool) -> TaskKind:
    """The kind of a validated task (the options conflicting with each other were refused
    before): parents first, then a delay, a group, a key, workers; else plain."""
    if waiting:
        return TaskKind.WAITING
    if delay_ms > 0:
        return TaskKind.DEBOUNCED if debounced else TaskKind.SCHEDULED
    if grouped:
        return TaskKind.GROUPED
    if key:
        return TaskKind.PROCESS_INPUT if (task_type.startswith(TYPE_PREFIX) and key.startswith(KEY_PREFIX)
                                          ) else TaskKind.KEYED
    return TaskKind.TARGETED if targeted else TaskKind.PLAIN


def store_call(broker: Broker, p: Any) -> Call[Any]:
    """The one call storing prepared task ``p`` (a ``Prepared``) by its kind (``p.kind``)."""
    return ROUTES[p.kind].store(broker, p)


def first_state(kind: TaskKind, reply: Any) -> TaskState:
    """The state a task of ``kind`` was stored in, from its store call's ``reply`` (a keyed task's
    call answers its state; any other kind starts in its route's)."""
    return reply if isinstance(reply, TaskState) else ROUTES[kind].state
