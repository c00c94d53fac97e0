"""A durable run as an operator sees it (sans I/O; docs/durable.md "Operating runs"): its summary
(:class:`RunInfo`: function, state, times, result or error) and its **timeline**, built from the
run's history (:func:`timeline`): each step's start, end, attempts and result or error, each
sleep with its wake time, each wait with its signal or its timeout, each signal sent (and the
position that consumed it), each task awaited.

A history event's time (``at``) is when the input that appended it committed; a step's start is
when the input that ran it began (``s`` in its record, written by ``DurableFunction.replay``). The
consumption of signals is worked out as the replay does it (each wait takes the oldest signal of its
name not taken yet and sent before its timeout fired; a task's end is its own internal signal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..model.errors import InvalidArgumentError
from ..processes.model import ERROR, STARTING, Event, Process
from .replay import CANCELLED, COMPLETED, FAILED, RETRYING, RUNNING, SLEEPING, TYPE_PREFIX, WAITING

STATES = (STARTING, RUNNING, RETRYING, SLEEPING, WAITING, COMPLETED, FAILED, CANCELLED, ERROR)
"""A run's states: its function's status, or ``error`` (stopped: its process is in error, as after
a determinism mismatch), or ``starting`` (its start has not run yet)."""
RESUMABLE = (FAILED, ERROR)
"""The states ``resume`` takes a run out of."""
TASK_SIGNAL = "\x00task:"


@dataclass(frozen=True)
class TimelineEntry:
    """One line of a run's timeline. ``kind``: ``start``, ``step``, ``task``, ``sleep``,
    ``wait``, ``signal``, ``now``/``uuid``/``random`` (a recorded value), ``resume``,
    ``cancelled``, ``failed``, ``done``. ``position``: the operation's position (None for a
    signal, the start and the end). ``status``: a step's or task's ``completed``, ``failed``,
    ``retrying`` (an attempt failed, the next one is due at ``wake``); a sleep's or wait's
    ``done``, ``sleeping``/``waiting``, ``timed out``; a signal's ``consumed`` (by ``by``, a
    position) or ``pending``. ``started``/``ended``: when it began and ended (None: not yet /
    unknown). ``value``: a result, a signal's payload, a recorded value, a start's arguments.
    ``error``: the last attempt's error. ``attempts``: attempts made. ``wake``: a sleep's wake
    time, a wait's timeout, a retry's time. ``task_id``: a task's id."""

    kind: str
    position: int | None = None
    name: str = ""
    status: str = ""
    started: datetime | None = None
    ended: datetime | None = None
    value: Any = None
    error: str = ""
    attempts: int = 0
    wake: datetime | None = None
    by: int | None = None
    task_id: str = ""


@dataclass(frozen=True)
class RunInfo:
    """A durable run: ``id``, ``function`` (its name), ``queue``, ``state`` (one of
    :data:`STATES`), ``created``/``updated``, ``wake`` (its timer: a sleep's end, a wait's
    timeout, a retry; None), ``result`` (completed), ``error`` (failed, cancelled, error),
    ``events`` (its history's length), ``tenant``, ``failing`` (the error of the input that
    holds its turn while that input waits for a retry), and its ``timeline`` (empty in a
    listing; :meth:`~asynqpy.Inspector.durable_run` fills it)."""

    id: str
    function: str
    queue: str
    state: str
    created: datetime | None = None
    updated: datetime | None = None
    wake: datetime | None = None
    result: Any = None
    error: str = ""
    events: int = 0
    tenant: str = ""
    failing: str = ""
    timeline: list[TimelineEntry] = field(default_factory=list)


def is_run(p: Process | str) -> bool:
    """Whether a process (or a process type) is a durable run."""
    return (p if isinstance(p, str) else p.type).startswith(TYPE_PREFIX)


def state_of(p: Process) -> str:
    """The run's state: ``error`` if its process is, else its function's status."""
    if p.status in (ERROR, STARTING):
        return p.status
    s = p.state if isinstance(p.state, dict) else {}
    return str(s.get("status") or RUNNING)


def info(p: Process, with_timeline: bool = False) -> RunInfo:
    """The run process ``p`` is (``with_timeline``: and its timeline, from ``p.history``, which
    holds its whole history)."""
    if not is_run(p):
        raise InvalidArgumentError(f"process {p.id!r} is a {p.type!r}, not a durable run")
    s = p.state if isinstance(p.state, dict) else {}
    error = p.error if p.status == ERROR else str(s.get("error") or "")
    return RunInfo(id=p.id, function=p.type[len(TYPE_PREFIX):], queue=p.queue, state=state_of(p), created=p.created,
                   updated=p.updated, wake=p.timer, result=s.get("result"), error=error, events=p.events,
                   tenant=p.tenant, failing=p.failing,
                   timeline=timeline(list(p.history)) if with_timeline else [])


def validate_state(state: str | None) -> str | None:
    if state is not None and state not in STATES:
        raise InvalidArgumentError(f"a run's state is one of {', '.join(STATES)}, got {state!r}")
    return state


def _ms(v: Any) -> datetime | None:
    return datetime.fromtimestamp(v / 1000, timezone.utc) if isinstance(v, (int, float)) else None


class _Builder:
    """The timeline's entries, by position, as the history's events come."""

    def __init__(self) -> None:
        self.out: list[TimelineEntry] = []
        self.ops: dict[int, int] = {}  # position -> index in out
        self.waits: list[tuple[int, str, int | None]] = []  # (position, signal name, index of its 'fired')
        self.signals: list[tuple[int, str, int]] = []  # (history index, name, index in out)

    def put(self, pos: int | None, entry: TimelineEntry) -> None:
        if pos is not None and pos in self.ops:
            self.out[self.ops[pos]] = entry
            return
        if pos is not None:
            self.ops[pos] = len(self.out)
        self.out.append(entry)

    def get(self, pos: int) -> TimelineEntry | None:
        return self.out[self.ops[pos]] if pos in self.ops else None

    def replace(self, pos: int, **changes: Any) -> None:
        e = self.get(pos)
        if e is not None:
            self.out[self.ops[pos]] = _with(e, **changes)


def _with(e: TimelineEntry, **changes: Any) -> TimelineEntry:
    return TimelineEntry(**{**e.__dict__, **changes})


def timeline(history: list[Event]) -> list[TimelineEntry]:
    """The timeline of a run's history (its events, in order, each an :class:`Event` whose data is
    the durable event recorded)."""
    b = _Builder()
    for n, ev in enumerate(history):
        d = ev.data if isinstance(ev.data, dict) else {}
        _add(b, n, ev.at, d)
    _consume(b, history)
    return [e for e in b.out if not (e.kind == "signal" and e.name.startswith(TASK_SIGNAL))]


def _started(b: _Builder, pos: int, d: dict[str, Any], at: datetime) -> datetime:
    """An attempt's start: its first attempt's (an entry already there), else its own ``s``."""
    prev = b.get(pos)
    return prev.started if prev is not None and prev.started else _ms(d.get("s")) or at


def _attempt(b: _Builder, pos: int, d: dict[str, Any], at: datetime) -> None:
    """A step's or task's record: a failed attempt (``try``), its end, or a task enqueued."""
    k, name, started = str(d.get("k")), str(d.get("n", "")), _started(b, pos, d, at)
    if k == "try":
        b.put(pos, TimelineEntry(str(d.get("o", "step")), pos, name, RETRYING, started, None,
                                 error=str(d.get("e", "")), attempts=int(d.get("a", 0)), wake=_ms(d.get("at"))))
    elif k == "task" and "e" not in d:
        b.put(pos, TimelineEntry("task", pos, name, WAITING, started, None, attempts=int(d.get("a", 1)),
                                 task_id=str(d.get("v", ""))))
    else:
        b.put(pos, TimelineEntry(k, pos, name, FAILED if "e" in d else COMPLETED, started, at, value=d.get("v"),
                                 error=str(d.get("e", "")), attempts=int(d.get("a", 1))))


def _fired(b: _Builder, pos: int, n: int, at: datetime) -> None:
    e = b.get(pos)
    if e is not None:
        b.replace(pos, status="done" if e.kind == "sleep" else "timed out", ended=at)
        b.waits = [(p, s, n if p == pos else f) for p, s, f in b.waits]


def _add(b: _Builder, n: int, at: datetime, d: dict[str, Any]) -> None:
    k, i = d.get("k"), d.get("i")
    pos: int = i if isinstance(i, int) else -1  # (an event without a position: -1, unused)
    if k in ("try", "step", "task"):
        _attempt(b, pos, d, at)
    elif k == "start":
        b.put(None, TimelineEntry("start", started=at, ended=at, value=d.get("a")))
    elif k == "sleep":
        b.put(pos, TimelineEntry("sleep", pos, "", SLEEPING, at, wake=_ms(d.get("u"))))
    elif k == "wait":
        b.put(pos, TimelineEntry("wait", pos, str(d.get("n", "")), WAITING, at, wake=_ms(d.get("u"))))
        b.waits.append((pos, str(d.get("n", "")), None))
    elif k == "fired":
        _fired(b, pos, n, at)
    elif k == "signal":
        b.signals.append((n, str(d.get("n", "")), len(b.out)))
        b.put(None, TimelineEntry("signal", None, str(d.get("n", "")), "pending", at, value=d.get("p")))
    elif k in ("now", "uuid", "random"):
        b.put(pos, TimelineEntry(str(k), pos, "", "", at, at, value=d.get("v")))
    elif k in ("done", "failed", "cancelled", "resume"):
        b.put(None, TimelineEntry(str(k), None, "", str(k), at, at, value=d.get("v"),
                                  error=str(d.get("e", d.get("reason", "")) or "")))


def _consume(b: _Builder, history: list[Event]) -> None:
    """Mark each signal consumed by the wait (or task) that took it, as the replay does."""
    taken: set[int] = set()
    claims: list[tuple[int, str, int | None]] = list(b.waits)
    for pos in sorted(b.ops):
        e = b.get(pos)
        if e is not None and e.kind == "task":
            claims.append((pos, f"{TASK_SIGNAL}{pos}", None))
    for pos, name, fired in sorted(claims):
        n = next((n for n, sig, _ in b.signals if sig == name and n not in taken and (fired is None or n < fired)),
                 None)
        if n is not None:
            taken.add(n)
            _take(b, pos, n, history[n].at)


def _take(b: _Builder, pos: int, n: int, at: datetime) -> None:
    """The signal of history index ``n`` taken by the operation at ``pos``: both entries say so."""
    idx = next(idx for m, _, idx in b.signals if m == n)
    b.out[idx] = _with(b.out[idx], status="consumed", by=pos)
    e = b.get(pos)
    if e is None:
        return
    if e.kind == "wait":
        b.replace(pos, status="done", ended=at, value=b.out[idx].value)
    elif e.kind == "task" and e.status == WAITING:
        end = b.out[idx].value if isinstance(b.out[idx].value, dict) else {}
        ok = end.get("s") == COMPLETED
        b.replace(pos, status=COMPLETED if ok else FAILED, ended=at, value=end.get("v"),
                  error="" if ok else f"task {e.task_id} ended {end.get('s')}")
