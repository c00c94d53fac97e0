"""Outcomes for waiting callers (``Client.result`` and ``Client.call``), sans I/O.

A client waiting on a queue has an *inbox* there (a list in the queue's slot, one per client and
queue): the script that finishes a task (done, complete, archive) pushes the outcome to the inbox
named by the task's ``reply_to`` (set by ``Client.call``) in the same atomic step, and returns the
inboxes of waiters that started waiting after the enqueue (registered by the ``watch`` script),
which the worker notifies right after (``reply`` script). An outcome is msgpack
``[id, kind, value]`` (the id as bytes): kind ``c`` (completed, value = the result) or ``x`` (archived, value = the
last error). :class:`Waiting` is the bookkeeping both the sync and the async inbox drive.

A client waiting for a durable run (``Client.result`` of a ``DurableRun``) waits in the same inbox
under the name :func:`run_waiter`: it registers with ``proc_watch`` (the pwatch hash), the next
commit of an input of the run's process returns its inbox and the worker pushes a completed
outcome of that name with no value, a wake-up: the waiter reads the run again (and waits again if
it has not ended). A recheck wakes a run's waiter too (and registers it again).
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any

import msgpack

from ..model import codec
from ..model.errors import MalformedMessageError, TaskFailedError, TaskNotFoundError
from ..spine.broker import Broker, Call, Watched
from ..spine.stored import message_of, state_char

COMPLETED = "c"
ARCHIVED = "x"
PROGRESS = "p"
RECHECK = 5.0
"""Seconds between two looks at the tasks a client waits for (a deleted task, a notification lost
to a crash or a Redis restart): the outcome itself arrives by push, not by this."""


RUN_WAITER = "\x00run:"
"""The start of an inbox waiter's name that waits for a durable run (:func:`run_waiter`): a task id
holds no control character (``validate_name``), so no task's waiter bears such a name."""


def run_waiter(run_id: str) -> str:
    """The inbox's name for the waiters of durable run ``run_id``."""
    return RUN_WAITER + run_id


def wake_calls(broker: Broker, queue: str, finished: Any) -> list[Call[Any]]:
    """The wake-ups a finishing script's success (a ``Finished``: proc_commit's, archive's) owes
    the clients waiting for its process (``watchers``): one push to each inbox, a completed
    outcome of the run waiter's name with no value. None for anything else."""
    watchers = getattr(finished, "watchers", ())
    if not watchers:
        return []
    wake = pack_outcome(run_waiter(finished.process), True, None)
    return [broker.reply(queue, inbox, wake) for inbox in watchers]


def check_call(broker: Broker, queue: str, id: str, inbox: str) -> Call[Any]:
    """A recheck's look at what waiter ``id`` of inbox ``inbox`` waits for: a task's watch (read
    only), or a run waiter's registration again (:meth:`Waiting.checked` wakes that waiter
    whatever it answers: the waiter reads the run)."""
    if id.startswith(RUN_WAITER):
        return broker.proc_watch(queue, id[len(RUN_WAITER):], inbox)
    return broker.watch(queue, id)


def new_inbox_id() -> str:
    """A random inbox id: 12 URL-safe characters (72 bits)."""
    return base64.urlsafe_b64encode(os.urandom(9)).decode()


@dataclass(frozen=True)
class Outcome:
    """How a task ended, for a waiting caller: completed with ``result``, or archived with
    ``error`` (its last error text)."""

    id: str
    queue: str
    completed: bool
    result: Any = None
    error: str = ""

    def value(self) -> Any:
        """The result, or :class:`TaskFailedError` raised for an archived task."""
        if not self.completed:
            raise TaskFailedError(self.id, self.queue, self.error)
        return self.result


def pack_outcome(id: str, completed: bool, value: Any) -> bytes:
    """The payload a finishing script pushes (the result must be msgpack-serializable: the worker
    checked it before)."""
    raw_id = id.encode(errors="surrogateescape")  # an id read from Redis may be any bytes
    data: bytes = codec.packer().pack([raw_id, COMPLETED if completed else ARCHIVED, value])
    return data


def pack_progress(id: str, value: Any) -> bytes:
    """The inbox entry for a progress report of a task a caller waits for."""
    data: bytes = codec.packer().pack([id.encode(errors="surrogateescape"), PROGRESS, value])
    return data


@dataclass(frozen=True)
class Progress:
    """A progress report read from an inbox."""

    id: str
    value: Any


def unpack_outcome(queue: str, data: bytes) -> Outcome | Progress | None:
    """An inbox entry: an outcome, or a progress report; None for data that is neither (an empty
    entry wakes a pop; anything else was written by hand)."""
    try:
        id, kind, value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - garbage in an inbox is skipped
        return None
    if not isinstance(id, bytes) or kind not in (COMPLETED, ARCHIVED, PROGRESS):
        return None
    id = id.decode(errors="surrogateescape")
    if kind == PROGRESS:
        return Progress(id, value)
    if kind == COMPLETED:
        return Outcome(id, queue, True, value)
    return Outcome(id, queue, False, error=value if isinstance(value, str) else repr(value))


def outcome_of_stored(id: str, queue: str, stored: bytes) -> Outcome:
    """The outcome of a finished task from its stored value (``c`` or ``x`` + message), as the
    watch script returns it."""
    try:
        msg = codec.decode(message_of(stored))
    except MalformedMessageError as exc:
        return Outcome(id, queue, False, error=f"its stored message cannot be read: {exc}")
    if state_char(stored) == COMPLETED.encode():
        return Outcome(id, queue, True, msg.result)
    return Outcome(id, queue, False, error=msg.last_error)


def not_found(id: str, queue: str) -> TaskNotFoundError:
    return TaskNotFoundError(
        f"task {id} not found in queue {queue}: it never existed, was deleted, finished without a kept "
        "result (retention 0) before the wait began, or was lost (Redis restarted without persistence)")


class Waiting:
    """The tasks one inbox waits for: id -> how many waiters, and what they learned.

    ``late`` ids were registered with the watch script (their notification is sent after the
    finishing script, so "not found" is believed only when seen twice: the task may have finished
    with retention 0 and its notification be on its way).

    A waiter is registered before its start (the enqueue of a call, the watch call of a late
    waiter) is sent, so that no outcome can be missed; until that start is acknowledged by Redis
    the id is *starting* and no recheck looks at it (the task may not be stored yet: a look would
    read it as not found)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.waiters: dict[str, int] = {}
        self.outcomes: dict[str, Outcome | BaseException] = {}
        self.late: set[str] = set()
        self.missing_once: set[str] = set()
        self.suspects: set[str] = set()
        self.starting: dict[str, int] = {}  # id -> waiters whose start Redis has not acknowledged
        self.progress: list[Progress] = []  # reports for waited-for tasks, not yet handed to callbacks

    def add(self, id: str, late: bool) -> None:
        """A waiter for ``id``, *starting* until :meth:`started` (or :meth:`remove`)."""
        self.waiters[id] = self.waiters.get(id, 0) + 1
        self.starting[id] = self.starting.get(id, 0) + 1
        if late:
            self.late.add(id)

    def started(self, id: str) -> None:
        """Redis acknowledged the start (enqueue or watch) of one waiter of ``id``: from now on a
        recheck may look at the task."""
        n = self.starting.get(id, 0) - 1
        if n > 0:
            self.starting[id] = n
        else:
            self.starting.pop(id, None)

    def checkable(self) -> list[str]:
        """The ids a recheck looks at: waited for, without an outcome, every start acknowledged."""
        return [id for id in self.waiters if id not in self.outcomes and id not in self.starting]

    def remove(self, id: str, started: bool = True) -> bool:
        """One waiter of ``id`` is gone (``started``: its start was acknowledged, else it is no
        longer starting either); True when it was the last."""
        if not started:
            self.started(id)
        n = self.waiters.get(id, 0) - 1
        if n > 0:
            self.waiters[id] = n
            return False
        self.waiters.pop(id, None)
        self.late.discard(id)
        self.missing_once.discard(id)
        return True

    def deliver(self, data: bytes) -> str | None:
        """An inbox entry: record it for its waiters; returns its id if someone waits for it."""
        out = unpack_outcome(self.queue, data)
        if out is None or out.id not in self.waiters:
            return None
        if isinstance(out, Progress):
            if out.id not in self.outcomes:
                self.progress.append(out)
            return None
        self.outcomes[out.id] = out
        return out.id

    def checked(self, id: str, reply: Any) -> None:
        """A recheck's watch reply for ``id``: record the outcome of a finished task; a task not
        found is only a suspect until :meth:`settle` (its outcome may sit in the inbox: the driver
        drains the inbox in between)."""
        if id not in self.waiters or id in self.outcomes or id in self.starting:
            return
        if id.startswith(RUN_WAITER):  # woken: it reads the run (registered again by the look)
            self.outcomes[id] = Outcome(id, self.queue, True)
        elif isinstance(reply, bytes):
            self.outcomes[id] = outcome_of_stored(id, self.queue, reply)
        elif reply is Watched.NOT_FOUND:
            self.suspects.add(id)
        else:
            self.missing_once.discard(id)

    def settle(self) -> list[str]:
        """After a recheck and an inbox drain: suspects that got no outcome are not found (a late
        waiter's task only when it was missing at two rechecks in a row). Returns the ids that got
        an outcome this way."""
        gone = []
        for id in self.suspects:
            if id not in self.waiters or id in self.outcomes or id in self.starting:
                continue  # (starting: a new waiter of this id registered during the look)
            if id in self.late and id not in self.missing_once:
                self.missing_once.add(id)
                continue
            self.outcomes[id] = not_found(id, self.queue)
            gone.append(id)
        self.suspects.clear()
        return gone
