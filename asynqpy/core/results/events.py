"""The lifecycle event stream of a queue, sans I/O: the events, and the calls that read them.

Every script that changes a task's state appends an event to its queue's stream
``asynqpy:{Q}:events`` (``lua/includes/events.lua``), capped at about ``events`` events (a
per-queue setting in ``asynqpy:{Q}:conf``; default 10 000, 0 = off). An event is a stream entry
whose fields are ``e`` (the event), ``id``, ``type`` and, depending on the event, ``attempt``,
``error``, ``due`` (ms) and ``value`` (a progress value, msgpack). Its time is the entry id's.
A batch of tasks enqueued together (generated ids, one type), a batch of tasks that finished
together (one type and attempt), and the tasks of one type one dequeue took are each one entry
(at most 50 ids an entry) whose ``ids`` field holds their ids, space-separated: it is read as one
event per task, all sharing the entry's ``stream_id``. The cap counts events, whatever the mix of
entries: the conf field ``kept`` counts the stream's events, and the oldest entries are trimmed
once it passes the cap by a hundredth (lua/includes/events.lua ``ev_trim``).

``active`` events (a worker took the task) are written only when someone reads them: while a
reader follows the stream (:class:`Reader` with ``follow``: it sets the conf field ``followed``
to a time FOLLOW_MS ahead, again every third of it) or always, when set so
(:func:`set_active`, conf field ``active`` = 1). They were half the stream's Redis time per task
and no reader of the kept events needs them (a task's state says it is active).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import msgpack

from ..model.errors import InvalidArgumentError
from ..model.task import ms_to_datetime
from ..spine.broker import Call
from ..spine.keys import queue_keys

EVENTS = ("enqueued", "scheduled", "active", "progress", "completed", "retry", "archived", "deleted",
          "cancelled", "lease_expired", "edited", "aggregated", "debounced", "run", "waiting", "blocked",
          "process_removed", "durable_step", "durable_sleep", "durable_wait", "durable_signal", "durable_end",
          "durable_resume", "tenant_forgotten")
"""Every event a stream holds."""
DEFAULT_CAP = 10_000
"""Events kept per queue unless set otherwise (the newest; up to a hundredth more between trims)."""
FOLLOW_MS = 60_000
"""How long (ms) a following reader's ask for ``active`` events lasts; it renews it every third."""


@dataclass(frozen=True)
class TaskEvent:
    """One lifecycle event of a task. ``attempt``: the attempt's number (from 1) where the event
    has one; ``error``: the error's first line (retry, archived); ``due``: when a scheduled or
    retried task becomes pending; ``value``: a progress value. ``stream_id`` resumes a read after
    this event (``since=``). A ``run`` event (a run of a targeted task ended) names the
    ``worker`` and its ``outcome``: "succeeded", "failed", "lease expired" or "given back"; a
    ``debounced`` event's ``by`` is the task that replaced it. ``tenant``: the task's tenant
    (``enqueue(tenant=)``; '' = none) on the events of its enqueue (``enqueued``, ``scheduled``,
    ``blocked``, ``waiting``) and of its every end (``completed``, ``retry``, ``archived``, ``cancelled``, ``deleted``,
    ``scheduled`` by a snooze, ...): what the exit path writes (lua/includes/exit.lua).
    ``from_state``: an ``enqueued`` event of an operator's "run now" (``Inspector.run_task``,
    ``asynqpy task run``): the state the task was run from ("archived", "scheduled", "retry")."""

    stream_id: str
    time: datetime
    queue: str
    event: str
    task_id: str
    type: str
    attempt: int | None = None
    error: str = ""
    due: datetime | None = None
    value: Any = None
    worker: str = ""
    outcome: str = ""
    by: str = ""
    tenant: str = ""
    from_state: str = ""


_OUTCOMES = {"s": "succeeded", "f": "failed", "e": "lease expired", "g": "given back"}
_FROM = {"s": "scheduled", "r": "retry", "x": "archived"}


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def parse_entry(queue: str, entry_id: Any, fields: dict[Any, Any]) -> TaskEvent:
    """A stream entry as a :class:`TaskEvent` (tolerant of hand-written entries)."""
    sid = _text(entry_id)
    f = {_text(k): v for k, v in fields.items()}
    try:
        ms = int(sid.split("-", 1)[0])
    except ValueError:
        ms = 0
    attempt = f.get("attempt")
    due = f.get("due")
    value: Any = None
    if "value" in f:
        try:
            value = msgpack.unpackb(f["value"], raw=False, strict_map_key=False)
        except Exception:  # noqa: BLE001 - shown as it is
            value = f["value"]
    return TaskEvent(
        sid, ms_to_datetime(ms) or datetime.fromtimestamp(0, timezone.utc), queue, _text(f.get("e", "")),
        _text(f.get("id", "")), _text(f.get("type", "")),
        int(attempt) if attempt is not None and _text(attempt).isdigit() else None, _text(f.get("error", "")),
        ms_to_datetime(int(due)) if due is not None and _text(due).isdigit() else None, value,
        _text(f.get("worker", "")), _OUTCOMES.get(_text(f.get("outcome", "")), _text(f.get("outcome", ""))),
        _text(f.get("by", "")), _text(f.get("tenant", "")),
        _FROM.get(_text(f.get("from", "")), _text(f.get("from", ""))),
    )


def parse_entries(queue: str, entry_id: Any, fields: dict[Any, Any]) -> list[TaskEvent]:
    """A stream entry as its events: one, or one per task of a batch entry (field ``ids``)."""
    ids = fields.get(b"ids", fields.get("ids"))
    if ids is None:
        return [parse_entry(queue, entry_id, fields)]
    one = parse_entry(queue, entry_id, fields)
    return [replace(one, task_id=id) for id in _text(ids).split()]


def start_id(since: datetime | float | str | None) -> str:
    """Where a read starts: None = the oldest event kept; a datetime or Unix seconds = events from
    that time; a stream id (a previous event's ``stream_id``) = the events after it."""
    if since is None:
        return "-"
    if isinstance(since, datetime):
        if since.tzinfo is None:
            since = since.astimezone()  # a naive datetime is local time
        return str(int(since.astimezone(timezone.utc).timestamp() * 1000))
    if isinstance(since, bool):
        raise InvalidArgumentError(f"since must be a datetime, Unix seconds or an event's stream_id, got {since!r}")
    if isinstance(since, (int, float)):
        if not 0 <= since < 1e11:
            raise InvalidArgumentError(f"since must be Unix seconds from 1970, got {since!r}")
        return str(int(since * 1000))
    if isinstance(since, str):
        ms, _, seq = since.partition("-")
        if not ms.isdigit() or (seq and not seq.isdigit()):
            raise InvalidArgumentError(f"since: {since!r} is not a stream id (like '1700000000000-0')")
        return "(" + since  # exclusive: the events after it
    raise InvalidArgumentError(f"since must be a datetime, Unix seconds or an event's stream_id, got {since!r}")


def page(queue: str, start: str, count: int) -> Call[list[TaskEvent]]:
    """Up to ``count`` events from ``start`` (XRANGE, oldest first)."""
    q = queue_keys(queue)
    return Call(lambda r: [e for i, f in r or [] for e in parse_entries(queue, i, f)],
                command=("XRANGE", q.events, start, "+", "COUNT", count))


def last_id(queue: str) -> Call[str]:
    """The newest event's id ('0-0' when there is none): where following starts from 'now'."""
    q = queue_keys(queue)
    return Call(lambda r: _text(r[0][0]) if r else "0-0", command=("XREVRANGE", q.events, "+", "-", "COUNT", 1))


def set_cap(queue: str, cap: int) -> Call[Any]:
    """Set a queue's stream cap (0 = off: no more events are written; the stream is deleted)."""
    if isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= 10_000_000:
        raise InvalidArgumentError(f"max_len must be an int from 0 (off) to 10000000, got {cap!r}")
    q = queue_keys(queue)
    return Call(lambda r: r, command=("HSET", q.conf, "events", cap))


def set_active(queue: str, on: bool) -> Call[Any]:
    """Write ``active`` events always (True), or only while a reader follows the stream (False,
    the default)."""
    q = queue_keys(queue)
    return Call(lambda r: r, command=("HSET", q.conf, "active", 1) if on else ("HDEL", q.conf, "active"))


def get_active(queue: str) -> Call[bool]:
    """Whether the queue writes ``active`` events always (not only while followed)."""
    q = queue_keys(queue)
    return Call(lambda r: r is not None and _text(r) == "1", command=("HGET", q.conf, "active"))


def followed(queue: str, now_ms: int) -> Call[list[TaskEvent]]:
    """A following reader's ask for ``active`` events until ``now_ms`` + FOLLOW_MS (read by the
    dequeue script against the Redis clock: a skew of seconds only shortens or lengthens it)."""
    q = queue_keys(queue)
    return Call(lambda r: [], command=("HSET", q.conf, "followed", now_ms + FOLLOW_MS))


def get_cap(queue: str) -> Call[int]:
    q = queue_keys(queue)
    return Call(lambda r: DEFAULT_CAP if r is None else int(r), command=("HGET", q.conf, "events"))


class Reader:
    """Reads a queue's events: the ones kept since ``since`` (oldest first), then with ``follow``
    the new ones as they come (XREAD BLOCK, ``block_ms`` at a time). The sync and async
    Inspectors drive it: ``call()`` gives the next call to run, ``feed(reply)`` the events it
    read; ``done`` is True when there is nothing more to read (never, when following). With
    ``follow`` its first call, and one every FOLLOW_MS / 3 after, asks for ``active`` events
    (:func:`followed`; its reply feeds no event)."""

    def __init__(self, queue: str, since: datetime | float | str | None = None, follow: bool = False,
                 batch: int = 500, block_ms: int = 5000) -> None:
        self.queue = queue
        self.key = queue_keys(queue).events
        self.start = start_id(since)
        self.follow = follow
        self.batch = batch
        self.block_ms = max(1, block_ms)
        self.following = False
        self.cursor = ""  # following: the id after which to read
        self.done = False
        self._mark_due = 0.0 if follow else float("inf")  # (monotonic) when to ask for active events again
        self._marking = False

    def call(self) -> Call[list[TaskEvent]]:
        now = time.monotonic()
        if now >= self._mark_due:  # following: active events are written while asked for
            self._mark_due, self._marking = now + FOLLOW_MS / 3000, True
            return followed(self.queue, int(time.time() * 1000))
        if not self.following:
            return page(self.queue, self.start, self.batch)

        def parse(reply: Any) -> list[TaskEvent]:
            out: list[TaskEvent] = []
            for _, entries in reply or []:
                for i, f in entries:
                    out += parse_entries(self.queue, i, f)
            return out

        return Call(parse, command=("XREAD", "COUNT", self.batch, "BLOCK", self.block_ms, "STREAMS", self.key,
                                    self.cursor))

    def feed(self, events: list[TaskEvent]) -> list[TaskEvent]:
        if self._marking:  # the reply of the ask for active events: nothing read
            self._marking = False
            return []
        if events:
            self.start = "(" + events[-1].stream_id
            self.cursor = events[-1].stream_id
        elif not self.following and not self.cursor:  # nothing kept after the start: follow from it
            if self.start == "-":
                self.cursor = "0-0"
            elif self.start.startswith("("):
                self.cursor = self.start[1:]
            else:
                self.cursor = f"{max(0, int(self.start) - 1)}-18446744073709551615"
        if not self.following and len(events) < self.batch:
            if self.follow:
                self.following = True
            else:
                self.done = True
        return events
