"""The task model users see: :class:`Task` (handed to handlers), :class:`TaskInfo` (returned by the
client and the inspector) and :class:`TaskState`."""

from __future__ import annotations

import contextvars
import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from ..deploy import versions as deploy
from ..results import tasklogs
from ..workflows.records import ParentEnd
from .codec import Message, encode_payload
from .errors import InvalidArgumentError, PayloadError, ResultError

_current: contextvars.ContextVar[Task] = contextvars.ContextVar("asynqpy_current_task")


def current_task() -> Task:
    """The task whose handler is running here (in its coroutine, or its thread for a plain-``def``
    handler): its id, retry count, headers, ``progress()``. :class:`InvalidArgumentError` outside
    of a handler."""
    try:
        return _current.get()
    except LookupError:
        raise InvalidArgumentError("current_task(): no task is running here (call it inside a handler)") from None


def running_task() -> Task | None:
    """The task whose handler is running here, or None (the task-log capture asks, per record)."""
    return _current.get(None)


def set_current(task: Task) -> None:
    """Mark ``task`` as the one running in the current context (the worker does it)."""
    _current.set(task)


_logs_lock = threading.Lock()
MAX_RESULT_BYTES = 1 << 20
"""The default largest encoded result (the server's ``max_result_bytes``)."""
MAX_PROGRESS_BYTES = 8192
"""Largest encoded progress value (:meth:`Task.progress`)."""


class TaskState(str, enum.Enum):
    """Where a task is in its lifecycle (see the state diagram in docs/internals-tasks.md)."""

    PENDING = "pending"
    ACTIVE = "active"
    SCHEDULED = "scheduled"
    RETRY = "retry"
    ARCHIVED = "archived"
    COMPLETED = "completed"
    AGGREGATING = "aggregating"
    TARGETED = "targeted"
    WAITING = "waiting"
    BLOCKED = "blocked"

    @property
    def code(self) -> str:
        """The one-character code stored in Redis."""
        return _CODES[self]

    @classmethod
    def from_code(cls, code: str) -> TaskState:
        return _BY_CODE[code]


_CODES = {
    TaskState.PENDING: "p",
    TaskState.ACTIVE: "a",
    TaskState.SCHEDULED: "s",
    TaskState.RETRY: "r",
    TaskState.ARCHIVED: "x",
    TaskState.COMPLETED: "c",
    TaskState.AGGREGATING: "g",
    TaskState.TARGETED: "m",
    TaskState.WAITING: "w",
    TaskState.BLOCKED: "b",
}
_BY_CODE = {v: k for k, v in _CODES.items()}


_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
_LATEST = datetime.max.replace(tzinfo=timezone.utc)


def ms_to_datetime(ms: int) -> datetime | None:
    """Unix milliseconds to an aware UTC datetime (0 = None). A time beyond what a datetime holds
    (data written to Redis by hand) gives the earliest or latest datetime."""
    if not ms:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return _LATEST if ms > 0 else _EARLIEST


_STORED: Any = object()
"""``Task._payload`` while the handler reads the message's own payload."""


class Task:
    """A task as a handler receives it.

    Attributes: ``type``, ``payload`` (decoded: bytes or the msgpack value enqueued), ``id``,
    ``queue``, ``tenant`` (``enqueue(tenant=)``; '' = none), ``retry_count`` (failures so far),
    ``max_retry``, ``deadline`` (absolute UTC datetime this attempt must finish by, or None) and
    ``result`` (what :meth:`write_result` set).
    """

    __slots__ = ("id", "queue", "_msg", "_payload", "_deadline", "result", "_has_result", "_report", "_max_result",
                 "_record", "_proc", "_logs", "_capture")

    def __init__(
        self,
        type: str,
        payload: Any = None,
        *,
        id: str = "",
        queue: str = "default",
        retry_count: int = 0,
        max_retry: int = 25,
        deadline: datetime | None = None,
        _msg: Message | None = None,
        _deadline_ms: int = 0,
    ) -> None:
        self._msg = _msg or Message(type=type, payload=payload, max_retry=max_retry, retried=retry_count)
        # the payload as the handler reads it where it is not the message's own: decrypted by the
        # worker, the message kept as stored (its payload's ciphertext is written back untouched)
        self._payload: Any = _STORED
        self.id = id
        self.queue = queue
        # (the worker gives its Unix ms: made a datetime when read, most handlers never read it)
        self._deadline: datetime | int | None = _deadline_ms or deadline
        self.result: Any = None
        self._has_result = False
        self._report: Callable[[bytes, Any], None] | None = None  # set by the worker running it
        self._max_result = MAX_RESULT_BYTES  # the server's max_result_bytes, set by the worker
        self._record: Any = None  # a workflow task's record (core.workflow.Record), set by the worker
        self._proc: Any = None  # a process input: the process as read, then the commit's plan (core.process)
        self._logs: tasklogs.Buffer | None = None  # this attempt's lines (task.log, captured records)
        self._capture = False  # the server captures this task's logging records (capture_logs)

    @property
    def type(self) -> str:
        return self._msg.type

    @property
    def deadline(self) -> datetime | None:
        """The absolute UTC time this attempt must finish by, or None."""
        d = self._deadline
        if isinstance(d, int):
            d = self._deadline = ms_to_datetime(d)
        return d

    @deadline.setter
    def deadline(self, value: datetime | None) -> None:
        self._deadline = value

    @property
    def payload(self) -> Any:
        p = self._payload
        return self._msg.payload if p is _STORED else p

    @property
    def retry_count(self) -> int:
        return self._msg.retried

    @property
    def max_retry(self) -> int:
        return self._msg.max_retry

    @property
    def tenant(self) -> str:
        """The tenant the task was enqueued for (``enqueue(..., tenant=)``); '' = none."""
        return self._msg.tenant

    @property
    def headers(self) -> dict[str, str]:
        """The ``headers`` the producer attached (empty if none)."""
        return dict(self._msg.headers or {})

    @property
    def parent_results(self) -> list[Any]:
        """A task enqueued with ``after=``: its parents' results, in the order ``after`` named
        them (a parent that failed under ``on_parent_failure="run"`` gives None; under
        ``"ignore"`` it is left out). Empty for a task without parents."""
        return [] if self._record is None else list(self._record.results())

    @property
    def parents(self) -> list[Any]:
        """A task enqueued with ``after=``: how each parent ended
        (:class:`asynqpy.core.workflows.records.ParentEnd`: ``queue``, ``id``, ``state``, ``result``)."""
        return [] if self._record is None else list(self._record.parents)

    @property
    def message(self) -> Message:
        """The underlying message (advanced use), with the payload the handler reads."""
        p = self._payload
        return self._msg if p is _STORED or p is self._msg.payload else self._msg.with_(payload=p)

    def write_result(self, data: Any) -> None:
        """Set this attempt's result (bytes or any msgpack value): what a waiting caller gets
        (``Client.call``, ``Client.result``), and what is kept with the task if it has a
        ``retention``; it wins over the handler's return value.

        A value that cannot be stored (not msgpack, or over the server's ``max_result_bytes``)
        raises :class:`~asynqpy.errors.ResultError` (a PayloadError) at once, in the handler; if
        the handler lets it escape, the task is archived with it, not retried (the attempt's side
        effects already ran)."""
        try:
            size = len(encode_payload(data, "result"))  # fail early if it cannot be stored
        except PayloadError as exc:
            raise ResultError(str(exc)) from None
        if size > self._max_result:
            raise ResultError(f"result is {size} bytes, over the server's max_result_bytes ({self._max_result})")
        self.result = data
        self._has_result = True

    def progress(self, value: Any) -> None:
        """Report this task's progress: any small msgpack value (a number, ``{"done": 3, "of":
        10}``...), at most :data:`MAX_PROGRESS_BYTES` encoded. The latest value is what
        ``TaskInfo.progress`` and ``asynqpy task inspect`` show, and what a ``Client.call(...,
        on_progress=...)`` caller receives. Cheap to call in a tight loop: the worker writes at
        most one value per task every 0.2 s (the latest wins). Works in sync and async handlers.

        Raises :class:`~asynqpy.errors.PayloadError` for a value that cannot be encoded or is too
        large (in the handler, which may catch it)."""
        data = encode_payload(value, "progress value")
        if len(data) > MAX_PROGRESS_BYTES:
            raise PayloadError(f"progress value is {len(data)} bytes, over the {MAX_PROGRESS_BYTES}-byte limit")
        if self._report is not None:
            self._report(data, value)

    def log(self, line: object) -> None:
        """Add a line to this attempt's logs (BullMQ's ``job.log``), kept with the task and shown
        by ``Inspector.task_logs``, ``asynqpy task inspect`` and the web console's task page.
        Anything is accepted: a str as it is, bytes decoded, any other value its ``str()``; never
        an error. An attempt keeps 100 lines and 16 KiB (a line over 4 KiB is cut; the lines past
        the bounds are counted in a last line). The lines are stored with the attempt's end when
        the task is kept: a task that succeeds without a ``retention`` is deleted, and its logs
        with it (docs/tasks.md "Task logs"). Works in sync and async handlers."""
        self.log_at(line, int(time.time() * 1000))

    def log_at(self, line: object, at_ms: int) -> None:
        """:meth:`log` with the line's time (Unix ms): a captured logging record's own."""
        buf = self._logs
        if buf is None:
            with _logs_lock:  # (a handler's threads may write its first line together)
                buf = self._logs
                if buf is None:
                    buf = self._logs = tasklogs.Buffer(self._msg.retried + 1)
        buf.add(line, at_ms)

    def logged(self, now_ms: int) -> Message:
        """The message with this attempt's lines added to the task's logs (itself when none)."""
        buf = self._logs
        if buf is None:
            return self._msg
        entries = buf.entries(now_ms)
        if not entries:
            return self._msg
        return self._msg.with_(logs=tasklogs.merged(self._msg.logs, entries))

    @property
    def logs(self) -> list[tasklogs.LogLine]:
        """The task's logs: its earlier attempts' lines (as stored) and this attempt's so far."""
        entries = list(self._msg.logs or ())
        if self._logs is not None:
            entries += self._logs.entries(int(time.time() * 1000))
        return tasklogs.lines(entries)

    @property
    def has_result(self) -> bool:
        """Whether :meth:`write_result` was called (it then wins over the handler's return value)."""
        return self._has_result

    def __repr__(self) -> str:
        return f"Task(type={self.type!r}, id={self.id!r}, queue={self.queue!r}, retry_count={self.retry_count})"


@dataclass(slots=True)
class TaskInfo:
    """A snapshot of a stored task. ``timeout``: seconds per attempt; None = the task has none of
    its own (the server's ``default_timeout`` applies); 0.0 = no limit. Times are aware UTC
    datetimes (None when not applicable). ``traceback``: the last failed attempt's traceback
    (bounded; '' when none), with ``last_error`` its one-line summary.

    Filled by the Inspector: ``enqueued_at``; for an active task ``lease_until`` (when its lease
    runs out unless renewed) and ``orphaned`` (the lease has already expired: its worker died or
    stalled, and the recoverer will retry it); for an archived task ``archived_at``. ``group``: the
    aggregation group the task was enqueued to ('' = none). ``priority``: 0 (lowest) to 9 (highest).
    ``replaced``: set by a debounced enqueue (``debounce=``) that replaced a task still waiting: its id.
    A targeted task (``workers=``, ``runs=``): ``workers`` (the names allowed, None = any),
    ``runs_wanted`` (how many distinct workers must succeed) and, filled by the Inspector while it
    is targeted or kept after it finished, ``runs``: worker name -> "running", "succeeded", "failed"
    or "lease expired", and ``run_results``: worker name -> its succeeded run's result (kept for
    tasks with a ``retention``; the task's ``result`` is the one of the run that completed it).
    A workflow task (``after=``): ``parents``, each a :class:`~asynqpy.core.workflows.records.ParentEnd`
    (``queue``, ``id``, ``state``: "waiting" until it ends, then "completed", "archived" or
    "deleted"; "unknown" where only the message was read) and ``on_parent_failure``; filled by the
    Inspector, ``children``: (queue, id) of the tasks registered as waiting on this one. ``key``:
    its ``key=`` (tasks sharing it run one at a time; '' = none). ``logs``: filled by
    ``Inspector.task_info`` (not by listings), the task's logs (:meth:`Task.log`,
    ``capture_logs``; as ``Inspector.task_logs``). ``held``: a scheduled task held by a deploy
    hold (docs/deploy.md): "type" (its type is blocked in the queue) or "version" (it waits for a
    worker of ``min_worker_version`` or newer); '' otherwise. ``min_worker_version``: its
    ``min_worker_version=`` ('' = any worker). ``tenant``: the tenant it belongs to (``tenant=``,
    docs/tenants.md; '' = none)."""

    id: str
    queue: str
    type: str
    payload: Any
    state: TaskState
    max_retry: int
    retried: int
    last_error: str
    last_failed_at: datetime | None
    next_process_at: datetime | None
    completed_at: datetime | None
    result: Any
    timeout: float | None
    deadline: datetime | None
    retention: float
    enqueued_at: datetime | None = None
    lease_until: datetime | None = None
    orphaned: bool = False
    archived_at: datetime | None = None
    traceback: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    progress: Any = None
    group: str = ""
    priority: int = 5
    replaced: str = ""
    workers: list[str] | None = None
    runs_wanted: int = 1
    runs: dict[str, str] = field(default_factory=dict)
    run_results: dict[str, Any] = field(default_factory=dict)
    parents: list[ParentEnd] = field(default_factory=list)
    children: list[tuple[str, str]] = field(default_factory=list)
    on_parent_failure: str = ""
    key: str = ""
    logs: list[tasklogs.LogLine] = field(default_factory=list)
    held: str = ""
    min_worker_version: str = ""
    tenant: str = ""

    @classmethod
    def like(cls, queue: str, template: Message) -> Callable[[str, str, Any, int, TaskState], TaskInfo]:
        """:meth:`from_message` for the messages that differ from ``template`` only in their type,
        payload and enqueue time (a client's Deriver makes them: checks.py): ``(id, type, payload,
        enqueued_at_ms, state) -> TaskInfo``, as from_message answers for a state without a time
        (pending; a test compares), made from the values of one made once, its dicts and lists
        copied (~3 µs less a lone enqueue)."""
        base = cls.from_message("", queue, TaskState.PENDING, template, 0)
        names = [f.name for f in fields(cls)]
        head = [getattr(base, n) for n in names]
        copied = [i for i, v in enumerate(head) if isinstance(v, (dict, list))]
        i_id, i_type, i_payload, i_state, i_enq = (names.index(n) for n in ("id", "type", "payload", "state",
                                                                            "enqueued_at"))

        def make(id: str, type: str, payload: Any, enqueued_at_ms: int, state: TaskState) -> TaskInfo:
            values = head.copy()
            for i in copied:
                values[i] = values[i].copy()
            values[i_id], values[i_type], values[i_payload], values[i_state] = id, type, payload, state
            values[i_enq] = ms_to_datetime(enqueued_at_ms)
            return cls(*values)

        return make

    @classmethod
    def from_message(
        cls, id: str, queue: str, state: TaskState, msg: Message, next_process_at_ms: int = 0
    ) -> TaskInfo:
        t = msg.timeout_ms
        timeout = None if t < 0 else t / 1000
        when = ms_to_datetime
        held = deploy.held_kind(next_process_at_ms) if state is TaskState.SCHEDULED else ""
        if held:
            next_process_at_ms = 0  # (a band score, not a time)
        return cls(id, queue, msg.type, msg.payload, state, msg.max_retry, msg.retried, msg.last_error,
                   when(msg.last_failed_at_ms), when(next_process_at_ms), when(msg.completed_at_ms), msg.result,
                   timeout, when(msg.deadline_ms), msg.retention_ms / 1000, when(msg.enqueued_at_ms),
                   traceback=msg.traceback, headers=dict(msg.headers or {}), group=msg.group,
                   priority=msg.priority, workers=list(msg.workers) if msg.workers is not None else None,
                   runs_wanted=msg.runs, key=msg.key,
                   parents=[ParentEnd(q, i, "unknown") for q, i in msg.after or ()], held=held,
                   min_worker_version=deploy.format_version(msg.min_version), tenant=msg.tenant)
