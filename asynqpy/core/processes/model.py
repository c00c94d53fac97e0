"""Durable processes, sans I/O (docs/processes.md; docs/internals-features.md "Durable processes").

A process (a payment, an order) is an instance of a process *type* with an id, a status, a state
and an append-only history of events. Everything that happens to it is an *input*, a task of type
``process:<type>`` with the key ``proc:<id>`` (keyed serial execution: the inputs of one process
run one at a time, in order, across all workers):

- ``init`` (``start_process``), ``call`` (``call_process``: the caller waits for the response),
  ``timeout`` (a timer the processor set), ``repair`` (``repair_process``, for a process in error),
  ``remove`` (``remove_process``).

The worker reads the process (``proc_read``), the processor turns (process, input) into a
:class:`Step` (events to append, the new state, the next timer, a response, or removal), and
``proc_commit`` writes the step in the script that completes the input: the record, the events
(numbered), the timer (a scheduled input), the caller's response, the key's release. An input
that fails for good is archived by ``archive``, which also marks the process ``error``.

This module holds the formats (the record, history entries, input payloads), the processor-facing
types, and the decisions that need no I/O.
"""

from __future__ import annotations

import contextvars
import hashlib
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import msgpack

from ..deploy.versions import format_version
from ..model import codec
from ..model.errors import AsynqpyError, InvalidArgumentError, SkipRetry
from ..model.task import Task
from ..workflows.records import rec_pack, rec_unpack

TYPE_PREFIX = "process:"
"""Task type of a process type's inputs: ``process:<type>``."""
KEY_PREFIX = "proc:"
"""Key (keyed serial execution) of a process's inputs: ``proc:<id>``."""
KINDS = ("init", "call", "timeout", "repair", "remove")
MAX_ID_LEN = 200
HISTORY_WINDOW = 20
"""Events of its recent history a processor sees by default (``history=`` of ``mux.process``)."""

RUNNING, STARTING, ERROR = "running", "starting", "error"
CHECKPOINTED_HISTORY = 5000
"""The most events a durable run's input reads (its whole history: the dequeue's page, one HMGET
under Lua's stack limit): a run whose history grows past it ends in error unless it continues as
new (``ctx.continue_as_new``)."""


class ProcessError(AsynqpyError):
    """A process operation cannot be done in the process's present status (a call to a process in
    error, a repair of one that is not)."""


class ProcessNotFoundError(ProcessError):
    """No process has this id in this queue (never started, or removed)."""


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()
"""A :class:`Step` field left as it was (the state, the timer)."""


@dataclass(frozen=True)
class Event:
    """One entry of a process's history: ``id`` (1, 2, ... in order), ``at`` (UTC, Redis clock),
    ``input`` (the id of the input task that appended it), ``kind`` (that input's kind) and
    ``data`` (what the processor returned as the event)."""

    id: int
    at: datetime
    input: str
    kind: str
    data: Any


@dataclass(frozen=True)
class Process:
    """A process as its processor and :meth:`asynqpy.Inspector.process` see it.

    ``status``: ``starting`` (its init input has not committed), ``running`` or ``error`` (an input
    failed for good: ``broken_by`` names it, ``error`` says why; only repair and remove inputs are
    taken until a repair succeeds). ``state``: the processor's latest state. ``history``: recent
    events (the processor gets the last ``history=`` of them; the Inspector pages).
    ``events``: how many events it has had; ``first_event``: the oldest one kept (1, unless its
    type keeps at most ``max_events``). ``timer``: when its pending timer fires (None: none).
    ``failing``: the last error of the input whose turn it is, while that input waits for a retry
    (an init that keeps failing leaves the process ``starting``; the inputs sent after it, a
    removal too, wait behind it): ``failing_input`` names it, ``failing_attempts`` counts its
    failed attempts; '' and 0 otherwise (the Inspector reads them; a processor sees them empty).
    ``tenant``: the tenant it was started for (``start_process(..., tenant=)``; '' = none): every
    input it gets, its timers too, belongs to that tenant (docs/tenants.md).
    ``min_worker_version``: the least worker version that takes its inputs (``start_process(...,
    min_worker_version=)``; '' = any worker): every input it gets, its timers too, carries that
    version gate (docs/deploy.md)."""

    id: str
    type: str
    status: str
    state: Any
    events: int
    history: Sequence[Event] = ()
    timer: datetime | None = None
    timer_id: str = ""
    created: datetime | None = None
    updated: datetime | None = None
    broken_by: str = ""
    error: str = ""
    queue: str = "default"
    first_event: int = 1
    failing: str = ""
    failing_input: str = ""
    failing_attempts: int = 0
    tenant: str = ""
    min_worker_version: str = ""


@dataclass(frozen=True)
class Input:
    """What a processor is given to act on: ``kind`` (init, call, timeout, repair), ``args`` (the
    caller's), ``task_id`` (the input task's id) and ``attempt`` (1 on the first run; a retry after
    a failure or a crash runs the same input again from the same process state)."""

    kind: str
    args: Any
    task_id: str
    attempt: int


@dataclass
class Step:
    """What a processor returns (None = a Step that changes nothing).

    ``events``: values appended to the history, in order. ``state``: the new state (:data:`KEEP`:
    unchanged). ``timer``: run a ``timeout`` input in this many seconds, or at this datetime;
    None cancels the pending timer; :data:`KEEP` leaves it. ``response``: what a ``call_process``
    caller gets back. ``remove``: delete the process (record and history) once this step is
    written. ``keep``: keep only the latest ``keep`` events once this step is written (0: as the
    type's ``max_events`` says)."""

    events: Sequence[Any] = ()
    state: Any = KEEP
    timer: Any = KEEP
    response: Any = None
    remove: bool = False
    keep: int = 0


Processor = Callable[[Process, Input], Step | None | Awaitable[Step | None]]


def validate_id(pid: object) -> str:
    if not isinstance(pid, str) or not pid or len(pid) > MAX_ID_LEN or not pid.isprintable():
        raise InvalidArgumentError(f"a process id must be a non-empty printable string of at most {MAX_ID_LEN} "
                                   f"characters, got {pid!r}")
    return pid


def validate_type(ptype: object) -> str:
    if not isinstance(ptype, str) or not ptype or len(ptype) > 200 or not ptype.isprintable():
        raise InvalidArgumentError(f"a process type must be a non-empty printable string, got {ptype!r}")
    return ptype


def task_type(ptype: str) -> str:
    return TYPE_PREFIX + ptype


def key_of(pid: str) -> str:
    return KEY_PREFIX + pid


CALL_RETENTION_S = 86400
"""How long an idempotent call's input (``call_process(..., idempotency_key=)``) is kept after it
committed, with its response, unless the call gives ``retention``: a repeat within it answers the
first call's response."""


def call_id(pid: str, kind: str, idempotency_key: object) -> str:
    """The input id of an idempotent call or repair of process ``pid``: the same for every repeat
    of ``idempotency_key`` (a non-empty printable string of at most 200 characters)."""
    if not isinstance(idempotency_key, str) or not idempotency_key or len(idempotency_key) > 200 \
            or not idempotency_key.isprintable():
        raise InvalidArgumentError("idempotency_key must be a non-empty printable string of at most 200 characters, "
                                   f"got {idempotency_key!r}")
    digest = hashlib.sha256(f"{pid}\0{kind}\0{idempotency_key}".encode()).hexdigest()[:32]
    return f"pcall-{digest}"


MIN_CALL_RETENTION_S = 300
"""The least an idempotent call's input is kept after it committed, whatever ``retention=`` says:
the connection's own resend of its store call (redis-py's retries, the sync executor's reconnect:
seconds after) must find the committed input, or it would store and run the call again (issue 42
#7)."""


def idempotent_options(options: dict[str, Any], id: str) -> dict[str, Any]:
    """A repeatable call's enqueue options: its fixed id and a retention that keeps its response
    for repeats (:data:`CALL_RETENTION_S` unless given, at least :data:`MIN_CALL_RETENTION_S`)."""
    retention = options.get("retention", CALL_RETENTION_S)
    if isinstance(retention, (int, float)) and not isinstance(retention, bool):
        retention = max(retention, MIN_CALL_RETENTION_S)
    return {**options, "retention": retention, "task_id": id}


def input_payload(pid: str, kind: str, args: Any) -> dict[str, Any]:
    """The payload of an input task."""
    return {"p": pid, "i": kind, "a": args}


def parse_input(task_type_: str, key: str, payload: Any) -> tuple[str, str, Any] | None:
    """(process id, kind, args) of an input task, or None if the task is not one."""
    if not task_type_.startswith(TYPE_PREFIX) or not key.startswith(KEY_PREFIX) or not isinstance(payload, dict):
        return None
    pid, kind = payload.get("p"), payload.get("i")
    if not isinstance(pid, str) or kind not in KINDS or key != KEY_PREFIX + pid:
        return None
    return pid, kind, payload.get("a")


def process_of(msg: codec.Message) -> tuple[str, str]:
    """(process id, input kind) of an input message, ('', '') for other tasks and malformed
    inputs: the archive script marks that process ``error`` if the input would have run its
    processor (lua/includes/process.lua ``proc_mark_error``)."""
    parsed = parse_input(msg.type, msg.key, msg.payload)
    return (parsed[0], parsed[1]) if parsed is not None else ("", "")


# -- the record (lua/includes/process.lua keeps the same layout) --------------------------------

R_TYPE, R_STATUS, R_STATE, R_N, R_TIMER, R_DUE, R_CREATED, R_UPDATED, R_BROKEN, R_ERROR, R_FIRST, R_TENANT, \
    R_MIN_VERSION = range(13)


def new_record(ptype: str, tenant: str = "", min_version: int = 0) -> bytes:
    """A started process's record before its init commits (times are set by the script); the
    tenant its inputs belong to (``start_process(..., tenant=)``) and the least worker version
    that takes them (``min_worker_version=``: its encoding, core/deploy/versions.py), kept as its
    last items."""
    fields = [ptype.encode(), STARTING.encode(), b"", b"0", b"", b"", b"", b"", b"", b""]
    if min_version:
        return rec_pack(fields + [b"", tenant.encode(), b"%d" % min_version])
    return rec_pack(fields + [b"", tenant.encode()] if tenant else fields)


def _ms(v: bytes) -> datetime | None:
    return datetime.fromtimestamp(int(v) / 1000, timezone.utc) if v else None


def _unpack(v: bytes) -> Any:
    return msgpack.unpackb(v, raw=False, strict_map_key=False) if v else None


@dataclass(frozen=True)
class Record:
    """A process's record as read: its ``fields`` and its stored bytes (``raw``, which the commit
    checks it still is)."""

    id: str
    fields: list[bytes]
    raw: bytes = b""

    @property
    def status(self) -> str:
        return self.fields[R_STATUS].decode()

    @property
    def count(self) -> int:
        return int(self.fields[R_N] or b"0")

    @property
    def timer_id(self) -> str:
        return self.fields[R_TIMER].decode()

    @property
    def first(self) -> int:
        """The oldest event kept (1 unless the type's ``max_events`` deleted older ones)."""
        return int(self.fields[R_FIRST]) if len(self.fields) > R_FIRST and self.fields[R_FIRST] else 1

    @property
    def expect(self) -> bytes:
        """What ``proc_commit`` checks the record still is: the bytes read."""
        return self.raw or rec_pack(self.fields)

    def view(self, history: Sequence[Event], queue: str) -> Process:
        f = self.fields
        return Process(id=self.id, type=f[R_TYPE].decode(), status=self.status, state=_unpack(f[R_STATE]),
                       events=self.count, history=history, timer=_ms(f[R_DUE]) if f[R_TIMER] else None,
                       timer_id=self.timer_id, created=_ms(f[R_CREATED]), updated=_ms(f[R_UPDATED]),
                       broken_by=f[R_BROKEN].decode(), error=f[R_ERROR].decode(errors="replace"), queue=queue,
                       first_event=self.first, tenant=f[R_TENANT].decode() if len(f) > R_TENANT else "",
                       min_worker_version=format_version(int(f[R_MIN_VERSION] or b"0")) if len(f) > R_MIN_VERSION
                       else "")


def parse_record(pid: str, raw: bytes) -> Record:
    return Record(pid, rec_unpack(raw), raw)


def parse_event(eid: int, raw: bytes) -> Event:
    at, input_id, kind, data = rec_unpack(raw)
    return Event(eid, _ms(at) or datetime.fromtimestamp(0, timezone.utc), input_id.decode(), kind.decode(),
                 _unpack(data))


class History(Sequence[Event]):
    """A page of a process's history, each event decoded when first read (a processor that does
    not look at its history pays nothing for it)."""

    def __init__(self, first: int, raw: list[bytes]) -> None:
        self._first = first
        self._raw = [(first + i, v) for i, v in enumerate(raw) if v]
        self._done: dict[int, Event] = {}

    def __len__(self) -> int:
        return len(self._raw)

    def _at(self, i: int) -> Event:
        ev = self._done.get(i)
        if ev is None:
            ev = self._done[i] = parse_event(*self._raw[i])
        return ev

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._at(j) for j in range(*i.indices(len(self._raw)))]
        return self._at(range(len(self._raw))[i])

    def __iter__(self) -> Iterator[Event]:
        return (self._at(i) for i in range(len(self._raw)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return repr(list(self))


def parse_read(pid: str, reply: Any, queue: str) -> Process | None:
    """The reply of ``proc_read`` ({record, first event id, entries...}; {} = no such process)."""
    if not reply:
        return None
    return parse_record(pid, reply[0]).view(History(int(reply[1]), list(reply[2:])), queue)


# -- deciding what an input does ------------------------------------------------------------------


class Refused(SkipRetry):
    """An input the process cannot take in its present status (a call to a process in error or
    removed): archived at once, the caller told why; the process is not touched."""


@dataclass
class Plan:
    """What ``proc_commit`` writes for an input (built by :func:`decide` / :func:`plan_step`)."""

    pid: str
    kind: str
    expect: bytes = b""  # the record as read (its stored bytes; b'' = skip: complete the input only)
    status: str = RUNNING
    state: bytes | None = None  # None = keep
    events: list[bytes] = field(default_factory=list)
    timer: str = "k"  # 'k' keep, 'x' cancel, 's' set
    timer_at: int = 0  # 's': when it fires (ms, on the clock of plan_step's now_ms: Redis's)
    remove: bool = False
    response: Any = None
    skipped: bool = False
    keep: int = 0  # the type's max_events (0 = all)
    result: bytes | None = None  # the response encoded (msgpack), once plan_step checked it (None: not yet)
    fields: list[bytes] | None = None  # the record's fields as read (None: parsed from expect when needed)


def decide(pid: str, kind: str, rec: Record | None, task_id: str) -> Plan | None:
    """Whether the processor runs for this input (None) or the input ends without it (a Plan
    that only completes it, or :class:`Refused` raised)."""
    if kind == "init":
        if rec is None or rec.status != STARTING:  # started already (a second start): nothing to do
            return Plan(pid, kind, skipped=True)
        return None
    if kind == "timeout":
        if rec is None or rec.status == ERROR or rec.timer_id != task_id:
            return Plan(pid, kind, skipped=True)  # a stale timer (replaced, cancelled) or a broken process
        return None
    if kind == "remove":
        if rec is None:
            return Plan(pid, kind, skipped=True)
        return Plan(pid, kind, expect=rec.expect, remove=True, fields=rec.fields)
    if rec is None:
        raise Refused(f"no process {pid!r} (never started, or removed)")
    if kind == "call" and rec.status == ERROR:
        raise Refused(f"process {pid!r} is in error (broken by input {rec.fields[R_BROKEN].decode()}: "
                      f"{rec.fields[R_ERROR].decode(errors='replace')}); repair it first")
    if kind == "repair" and rec.status != ERROR:
        raise Refused(f"process {pid!r} is {rec.status}, not in error: nothing to repair")
    return None


TIMER_MAX_S = 100 * 365 * 24 * 3600
"""The longest timer a step sets, in seconds (100 years, as every duration an option takes: its due
time stays below the held tasks' band of the scheduled zset, docs/internals-scripts.md "Bands and sentinels")."""


def _due_ms(timer: Any, now_ms: int) -> int:
    """When a Step's timer fires: a datetime as it is, seconds from ``now_ms`` (an absolute time, so
    that the time the commit waits for its turn in the worker's batch is not added to it)."""
    if isinstance(timer, datetime):
        if timer.tzinfo is None:
            raise InvalidArgumentError("a timer datetime must be timezone-aware")
        return max(0, min(int(timer.timestamp() * 1000), now_ms + TIMER_MAX_S * 1000))
    if isinstance(timer, bool) or not isinstance(timer, (int, float)) or not 0 <= timer <= TIMER_MAX_S:
        raise InvalidArgumentError(f"Step.timer must be seconds from 0 to 100 years, a datetime, None or KEEP, "
                                   f"got {timer!r}")
    return now_ms + int(timer * 1000)


def plan_step(pid: str, kind: str, rec: Record | None, step: Any, now_ms: int) -> Plan:
    """The commit of what the processor returned (raises InvalidArgumentError for a malformed
    Step: the input fails, and is retried or archived like any failure)."""
    if step is None:
        step = Step()
    if not isinstance(step, Step):
        raise InvalidArgumentError(f"a processor returns a Step or None, got {type(step).__name__}")
    plan = Plan(pid, kind, expect=rec.expect if rec is not None else b"", remove=bool(step.remove),
                response=step.response, fields=rec.fields if rec is not None else None)
    if step.state is not KEEP:
        plan.state = codec.encode_payload(step.state, "process state") if step.state is not None else b""
    if isinstance(step.events, (str, bytes)) or not isinstance(step.events, Sequence):
        raise InvalidArgumentError("Step.events is a list of values")
    plan.events = [codec.encode_payload(e, "event") for e in step.events]
    if step.timer is None:
        plan.timer = "x"
    elif step.timer is not KEEP:
        plan.timer, plan.timer_at = "s", _due_ms(step.timer, now_ms)
    plan.result = codec.encode_payload(step.response, "response") if step.response is not None else b""
    return plan


def _item(v: bytes) -> bytes:
    return b"%d:%s" % (len(v), v)


def _pack(items: list[bytes]) -> bytes:
    """:func:`~asynqpy.core.workflows.records.rec_pack` (a list comprehension: cheaper on this hot path)."""
    return b"".join([b"%d:%s" % (len(v), v) for v in items])


def _entries(plan: Plan, input_id: bytes, n: int) -> tuple[list[bytes], int]:
    """The hist fields and entries (but their time) of the events a plan appends after event
    ``n``, and the new count."""
    events: list[bytes] = []
    if plan.events:
        pid, tail = plan.pid.encode(errors="surrogateescape"), _item(input_id) + _item(plan.kind.encode())
        for data in plan.events:
            n += 1
            events += [b"%s:%d" % (pid, n), tail + _item(data)]
    return events, n


def _trim(plan: Plan, f: list[bytes], n: int, first: int) -> tuple[int, int]:
    """The events the type's max_events drops once the plan's are appended (drop_from, drop_to;
    none: to < from), the record's first moved on."""
    if plan.keep <= 0 or n - plan.keep < first:
        return 1, 0
    if len(f) <= R_FIRST:
        f += [b""] * (R_FIRST + 1 - len(f))
    f[R_FIRST] = b"%d" % (n - plan.keep + 1)
    return first, n - plan.keep


def step_args(plan: Plan, input_id: bytes, timer_id: bytes) -> tuple[str, bytes, bytes, bytes, bytes, bytes, int, int,
                                                                     bytes]:
    """What ``proc_commit`` writes for ``plan`` (lua/proc_commit.lua): (op, rec_a, rec_due,
    rec_b, rec_c, new_events, drop_from, drop_to, cancel). The worker builds the new record from
    the one it read (the script checks the record is still those bytes) and the step; the script
    only puts in the times it takes from Redis's clock (the record's 'updated', the events' 'at',
    the due time of a timer the step sets: ``timer_id``, b'' = none). A skipped plan writes
    nothing of the process."""
    if plan.skipped:
        return "w", b"", b"", b"", b"", b"", 1, 0, b""
    f = list(plan.fields if plan.fields is not None else rec_unpack(plan.expect))
    first = int(f[R_FIRST]) if len(f) > R_FIRST and f[R_FIRST] else 1
    n = int(f[R_N] or b"0")
    spent = f[R_TIMER] if f[R_TIMER] != input_id else b""  # (the running input is not cancelled)
    if plan.remove:
        return "r", b"", b"", b"", b"", b"", first, n, spent
    events, n = _entries(plan, input_id, n)
    f[R_N] = b"%d" % n
    drop_from, drop_to = _trim(plan, f, n, first)
    f[R_STATUS], f[R_BROKEN], f[R_ERROR] = RUNNING.encode(), b"", b""
    if plan.state is not None:
        f[R_STATE] = plan.state
    cancel = b""
    if plan.timer != "k" or f[R_TIMER] == input_id:  # a timer that fired is spent
        cancel, f[R_TIMER], f[R_DUE] = spent, b"", b""
    due = _item(f[R_DUE])
    if timer_id:
        f[R_TIMER], due = timer_id, b""
    return ("w", _pack(f[:R_DUE]), due, _item(f[R_CREATED]), _pack(f[R_UPDATED + 1:]),
            _pack(events) if events else b"", drop_from, drop_to, cancel)


def checkpoint_args(rec: Record, kind: str, events: Sequence[Any], input_id: bytes) -> tuple[int, bytes, list[bytes]]:
    """What ``proc_step`` writes (lua/proc_step.lua): (the count once ``events`` are appended, the
    hist fields and entries but their time, the events encoded). The record keeps everything else."""
    plan = Plan(rec.id, kind, events=[codec.encode_payload(e, "event") for e in events])
    entries, n = _entries(plan, input_id, rec.count)
    return n, _pack(entries) if entries else b"", plan.events


def checkpointed(held: Record, count: int, raw: bytes) -> Record:
    """The record as a written checkpoint left it (lua/proc_step.lua: checked to be ``held``, then its
    count set to ``count`` and its ``updated`` to Redis's time): ``raw`` as stored, what the next
    checkpoint or the commit checks, and the fields held with the new count, not parsed again. Its
    ``updated`` field stays the one read: the commit writes its own (``step_args`` leaves it out)."""
    fields = list(held.fields)
    fields[R_N] = b"%d" % count
    return Record(held.id, fields, raw)


Checkpoint = Callable[[Sequence[Any]], Awaitable[bool]]
"""What a processor that writes part of its step before returning (a durable function's run,
``ProcessHandler(checkpoints=True)``) is given in :data:`CHECKPOINT`: ``await checkpoint(events)``
appends ``events`` to the history now (the record keeps its status, state and timer) and returns
whether the input should end (other inputs wait for the process, or its time is spent)."""
CHECKPOINT: contextvars.ContextVar[Checkpoint | None] = contextvars.ContextVar("asynqpy_process_checkpoint",
                                                                               default=None)
NOW: contextvars.ContextVar[Callable[[], int] | None] = contextvars.ContextVar("asynqpy_process_now", default=None)
"""The clock an input of a processor runs by, given by the worker beside :data:`CHECKPOINT`: Redis's
time as the worker reckons it (``Clock.now_ms``, ms), the clock a step's timer fires by. A durable
run reads its time from it (``ctx.now()``, its sleeps' ends), so that a worker whose own clock is off
neither wakes its runs early, over and over, nor late; None (outside a worker): this host's clock."""


def response_of(plan: Plan) -> bytes:
    """The plan's response encoded (msgpack; b'' = None)."""
    if plan.result is not None:
        return plan.result
    return b"" if plan.response is None else codec.encode_payload(plan.response, "response")


def error_of(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class ProcessHandler:
    """The mux handler of a process type's inputs (``mux.process``): runs the processor with the
    process the worker read (``task._proc``: a (Record | None, history) pair) and leaves the
    :class:`Plan` in ``task._proc`` for the worker's commit."""

    def __init__(self, ptype: str, fn: Processor, history: int = HISTORY_WINDOW, max_events: int = 0,
                 checkpoints: bool = False) -> None:
        self.type = validate_type(ptype)
        self.checkpoints = checkpoints  # the processor writes part of its step early (CHECKPOINT)
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        most = CHECKPOINTED_HISTORY if checkpoints else 1000  # (a durable run's replay reads its whole history)
        if isinstance(history, bool) or not isinstance(history, int) or not 0 <= history <= most:
            raise InvalidArgumentError(f"history must be an int from 0 to {most}, got {history!r}")
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 0:
            raise InvalidArgumentError(f"max_events must be an int >= 0 (0 = keep every event), got {max_events!r}")
        self.history = history
        self.max_events = max_events

    async def __call__(self, task: Task) -> None:
        raise ProcessError("a processor runs in a server, which reads and writes its process; it cannot be called "
                           "as a plain handler")

    def __repr__(self) -> str:
        return f"<process {self.type} {getattr(self.fn, '__qualname__', self.fn)!r}>"

    def prepare(self, task: Task, parsed: tuple[str, str, Any] | None = None) -> tuple[Plan | None, Process | None,
                                                                                       Input]:
        """(a plan that ends the input without the processor, or None; the process; the input).
        ``parsed``: the input's :func:`parse_input`, if the caller has it."""
        if parsed is None:
            parsed = parse_input(task.type, task.message.key, task.payload)
        if parsed is None:
            raise Refused(f"task {task.id} is not a well-formed input of process type {self.type!r}")
        pid, kind, args = parsed
        rec, history = task._proc if task._proc is not None else (None, ())
        inp = Input(kind, args, task.id, task.retry_count + 1)
        plan = decide(pid, kind, rec, task.id)
        return plan, (rec.view(history, task.queue) if rec is not None and plan is None else None), inp

    def finish(self, task: Task, step: Any, now_ms: int, parsed: tuple[str, str, Any] | None = None) -> None:
        pid, kind, _ = parsed or parse_input(task.type, task.message.key, task.payload)  # type: ignore[misc]
        rec = task._proc[0] if task._proc is not None else None
        task._proc = plan_step(pid, kind, rec, step, now_ms)
        task._proc.keep = step.keep if isinstance(step, Step) and step.keep > 0 else self.max_events
