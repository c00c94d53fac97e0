"""What the Inspector reads and does, written once as sans-IO *plans*.

A plan is a generator: it yields the broker :class:`~asynqpy.broker.Call` list of one round trip
(run pipelined by the caller), receives the list of results (each a value or the exception that
call raised), and finally returns its answer. :class:`~asynqpy.inspector.Inspector` runs plans
synchronously and :class:`~asynqpy.inspector.AsyncInspector` awaits them, so both share every line
of inspection logic.

Redis work per call is O(1) or O(page size) whatever the queue depth: counts come from LLEN/ZCARD,
pages from LRANGE/ZRANGE by rank (a deep LRANGE offset costs one hop per list node, not per
element), bulk operations go in batches of at most ``batch`` tasks per script call.
"""

from __future__ import annotations

import binascii
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any, TypeVar

import msgpack

from ..model import codec
from ..model.codec import Message, decode
from ..model.errors import (
    InvalidArgumentError,
    MalformedMessageError,
    QueueNotEmptyError,
    QueueNotFoundError,
    TaskNotFoundError,
    TaskStateError,
)
from ..model.task import TaskInfo, TaskState, ms_to_datetime
from ..results import tasklogs
from ..results.tasklogs import LogLine
from ..security.signing import Refused, Verified, trust_gate
from ..server import record as server_record
from ..server.record import ServerInfo
from ..spine.broker import (
    Acted,
    Broker,
    Call,
    QueueStats,
    Snapshot,
    id_arg,
)
from ..spine.keys import ALL_QUEUES, CRON_QUEUES, SERVERS, queue_keys, server_info, validate_group
from ..spine.queue_settings import STATS_FIELDS, stats_values
from ..spine.stored import is_active, lock_digest, message_of, state_char, token_of
from ..workflows.records import Record

T = TypeVar("T")
Plan = Generator[list[Call[Any]], list[Any], T]
"""A plan: yields the calls of one round trip, is sent their results, returns its answer."""

MAX_PAGE_SIZE = 1000
"""Largest page ``list_tasks`` returns (bounds the work of one call)."""
MAX_OFFSET = 10**15
"""The furthest position a listing starts at (a page of tasks or processes, a process's first
event): beyond about 10**16 the scripts' numbers no longer reach Redis as integers."""


def page_start(page: object, page_size: int) -> int:
    """The position (0-based) page ``page`` (from 1) of ``page_size`` items starts at;
    InvalidArgumentError for a page that is not an int >= 1 or that starts past
    :data:`MAX_OFFSET`."""
    last = MAX_OFFSET // page_size + 1
    if isinstance(page, bool) or not isinstance(page, int) or not 1 <= page <= last:
        raise InvalidArgumentError(f"page must be an int from 1 to {last} (pages of {page_size}), got {page!r}")
    return (page - 1) * page_size


MAX_HISTORY_DAYS = 90
"""Daily counters are kept 90 days."""
MEMORY_SAMPLES = 5
"""MEMORY USAGE ... SAMPLES n: nested values sampled per key (bounded work on any size)."""
STATS_BATCH = 50
"""Queues per call of the stats script by :meth:`Plans.all_queue_info`: 12 to 14 Redis commands a
queue (7 more with the memory reading), about 25 µs of Redis CPU (35 with the memory) measured on a
loaded 2-core machine, so that one call holds Redis about 1 ms; more queues a call save nothing
measurable."""
BATCH = 1000
"""Tasks per script call of a bulk operation (delete_all, run_all, archive_all)."""
WINDOW = 10_000
"""How far from each end of the pending list one task is looked for by a script (LPOS MAXLEN:
~0.1 ms for 10 000 ids); a task deeper in the list is located page by page from Python."""
LOCATE_PAGE = 5_000
"""Ids per LRANGE when locating a pending task deep in a long list."""
SEARCH_BATCH = 500
"""Fields of a queue's task hash one HSCAN call of :meth:`Plans.find_tasks` asks for."""
SEARCH_SCAN = 10_000
"""About how many fields one :meth:`Plans.find_tasks` looks at before it returns (with its cursor)."""
CANCELLED = "cancelled by an operator"
"""The last_error of a cancelled task."""

G, M, W, B = TaskState.AGGREGATING, TaskState.TARGETED, TaskState.WAITING, TaskState.BLOCKED
P, A, S, R, X, C = (TaskState.PENDING, TaskState.ACTIVE, TaskState.SCHEDULED, TaskState.RETRY, TaskState.ARCHIVED,
                    TaskState.COMPLETED)
ALLOWED = {"delete": (P, S, R, X, C, G, M, W, B), "run": (S, R, X, G), "archive": (P, S, R, G, M, W, B)}
EDIT_STATES = (P, S, R)
"""The states a task can be edited in (a waiting task: not running, not finished)."""
EDITABLE = frozenset({"payload", "max_retry", "process_at", "process_in", "priority"})
"""What :meth:`Plans.edit` can change."""
"""The states each action applies to (active tasks: cancel)."""


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A snapshot of one queue. ``latency``: seconds since the oldest pending task was enqueued
    (0.0 if none). ``memory_bytes``: approximate (sampled MEMORY USAGE of the queue's keys), None
    when Redis refuses MEMORY. ``trimmed``: archived tasks deleted so far by the archive limits
    (``archive_max_size`` / ``archive_max_age``): failures that can no longer be listed.
    ``aggregating``: tasks waiting in aggregation groups; ``groups``: how many groups hold them.
    ``waiting``: tasks waiting on their parents (``after=``); ``blocked``: tasks waiting behind
    an earlier task of their ``key=``; ``tenants``: how many tenants (``tenant=``) have pending
    tasks.
    ``targeted``: targeted tasks (``workers=``, ``runs=``) not finished yet (their runs that are
    running count as active). ``max_pending`` / ``overflow``: the queue's cap (None = none;
    docs/queues.md "Bounded queues"), ``rejected`` / ``dropped``: the tasks its caps (the queue's and its
    tenants') refused and archived so far."""

    queue: str
    size: int
    pending: int
    active: int
    scheduled: int
    retry: int
    archived: int
    completed: int
    paused: bool
    latency: float
    processed_today: int
    failed_today: int
    processed_total: int
    failed_total: int
    memory_bytes: int | None
    timestamp: datetime
    trimmed: int = 0
    aggregating: int = 0
    groups: int = 0
    targeted: int = 0
    waiting: int = 0
    blocked: int = 0
    tenants: int = 0
    max_pending: int | None = None
    overflow: str = "reject"
    rejected: int = 0
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """An aggregation group: its name, how many tasks it holds, when its oldest and its newest
    task joined (UTC)."""

    group: str
    size: int
    oldest: datetime | None
    newest: datetime | None


@dataclass(frozen=True, slots=True)
class DailyStats:
    """Processed and failed counts of one queue on one UTC day."""

    queue: str
    date: date
    processed: int
    failed: int


def enqueued_at(body: bytes) -> int:
    """The ``enqueued_at_ms`` of an encoded message (the third item of its array), read without
    decoding the rest (a payload may be large); 0 when there is none or it cannot be read."""
    try:
        unpacker = msgpack.Unpacker()
        unpacker.feed(body)
        if unpacker.read_array_header() < 3:
            return 0
        unpacker.skip()
        unpacker.skip()
        ms = unpacker.unpack()
    except Exception:  # noqa: BLE001 - msgpack raises several unrelated types on garbage
        return 0
    return ms if isinstance(ms, int) and not isinstance(ms, bool) and ms > 0 else 0


def key_slot(key: str) -> int:
    """The Redis Cluster slot of ``key`` (CRC16-XMODEM of its hash tag, or of the whole key)."""
    raw = key.encode(errors="surrogateescape")
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1:end]
    return binascii.crc_hqx(raw, 0) % 16384


def parse_state(state: TaskState | str) -> TaskState:
    """A TaskState from itself or its name; InvalidArgumentError on anything else."""
    if isinstance(state, TaskState):
        return state
    try:
        return TaskState(state.strip().lower() if isinstance(state, str) else state)  # -s Archived too
    except ValueError:
        names = "|".join(s.value for s in TaskState)
        raise InvalidArgumentError(f"unknown task state {state!r}: use {names}") from None


RUN_STATES = {"r": "running", "s": "succeeded", "f": "failed", "e": "lease expired"}


@dataclass(frozen=True, slots=True)
class RunsRecord:
    """A targeted task's runs record (lua/includes/runs.lua), read back."""

    runs: int
    allowed: list[str] | None  # None: any worker
    failures: int
    states: dict[str, str]  # worker name -> running / succeeded / failed / lease expired


def parse_runs(raw: bytes) -> RunsRecord:
    """The record stored in the runs hash: ``"<runs> <allowed> <failures> name=s:ms ..."``."""
    head, *entries = raw.decode(errors="replace").split(" ")
    parts = [head, *entries[:2]]
    n, allowed, failures = (parts + ["1", "*", "0"][len(parts):])[:3]
    states: dict[str, str] = {}
    for e in entries[2:]:
        name, _, rest = e.partition("=")
        states[name] = RUN_STATES.get(rest[:1], rest[:1])
    return RunsRecord(int(n), None if allowed == "*" else allowed.split(","), int(failures), states)


def _as_dict(reply: Any) -> dict[Any, Any]:
    """An HGETALL reply as a dict (a flat list where no response callback made it one)."""
    if isinstance(reply, list):
        return dict(zip(reply[::2], reply[1::2]))
    return reply if isinstance(reply, dict) else {}


def run_results(kept: dict[Any, Any]) -> dict[str, Any]:
    """The results of a targeted task's succeeded runs, from its kept hash ('r:<worker>' fields)."""
    out: dict[str, Any] = {}
    for field_, data in kept.items():
        name = field_.decode(errors="replace") if isinstance(field_, bytes) else str(field_)
        if name.startswith("r:"):
            try:
                out[name[2:]] = msgpack.unpackb(data, raw=False, strict_map_key=False)
            except Exception:  # noqa: BLE001 - written by hand: shown as it is
                out[name[2:]] = data
    return out


def value(result: Any) -> Any:
    """One call's result, raising the exception it holds."""
    if isinstance(result, Exception):
        raise result
    return result


def task_from_stored(id: str, queue: str, stored: bytes, score: float | None, now_ms: int) -> TaskInfo:
    """A TaskInfo from a stored value (state char [+ lease token] + message) and the score of the
    task in its state's zset. A message that does not decode gives type ``(malformed)`` with the
    raw bytes as payload (it can still be listed, deleted or archived)."""
    try:
        state = TaskState.from_code(state_char(stored).decode())
    except (KeyError, UnicodeDecodeError):
        raise MalformedMessageError(f"task {id!r} has an unknown state {state_char(stored)!r}") from None
    body = message_of(stored)
    try:
        msg = decode(body)
    except MalformedMessageError as exc:
        msg = Message("(malformed)", payload=bytes(body[:4096]), last_error=str(exc))
    ms = int(score) if score is not None else 0
    due = ms if state in (TaskState.SCHEDULED, TaskState.RETRY) else 0
    info = TaskInfo.from_message(id, queue, state, msg, due)
    if state is TaskState.ACTIVE and ms:
        info.lease_until = ms_to_datetime(ms)
        info.orphaned = ms <= now_ms
    elif state is TaskState.ARCHIVED and ms:
        info.archived_at = ms_to_datetime(ms)
    return info


def _glob_escape(text: str) -> str:
    """``text`` with the glob characters of a SCAN MATCH pattern escaped (matched as themselves)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _check_search(id_prefix: object, task_type: object, cursor: object, limit: object) -> None:
    """InvalidArgumentError for a search's bad argument."""
    if not isinstance(id_prefix, str) or not isinstance(task_type, str):
        raise InvalidArgumentError("id_prefix and task_type must be strings")
    for name, n, low, high in (("cursor", cursor, 0, None), ("limit", limit, 1, MAX_PAGE_SIZE)):
        if isinstance(n, bool) or not isinstance(n, int) or n < low or (high is not None and n > high):
            raise InvalidArgumentError(f"{name} must be an int from {low}{f' to {high}' if high else ''}, got {n!r}")


def _scanned(queue: str, reply: Any, now_ms: int) -> tuple[int, list[TaskInfo]]:
    """An HSCAN reply of a queue's task hash: the next cursor and the tasks (malformed ones left out)."""
    fields = reply[1]
    pairs = list(fields.items()) if isinstance(fields, dict) else list(zip(fields[0::2], fields[1::2]))
    out = []
    for raw_id, stored in pairs:
        id = raw_id.decode(errors="surrogateescape") if isinstance(raw_id, bytes) else str(raw_id)
        try:
            out.append(task_from_stored(id, queue, stored, None, now_ms))
        except MalformedMessageError:
            continue
    return int(reply[0]), out


def _logs_of(stored: bytes) -> list[LogLine]:
    """A stored task's logs (none for a message that does not decode: task_info shows it malformed)."""
    try:
        return tasklogs.lines(decode(message_of(stored)).logs)
    except MalformedMessageError:
        return []


def _scores(reply: list[Any]) -> dict[str, float]:
    """A ZRANGE ... WITHSCORES reply (flat, or as pairs) as member -> score."""
    if reply and isinstance(reply[0], (list, tuple)):
        pairs = [(m, s) for m, s in reply]
    else:
        pairs = list(zip(reply[0::2], reply[1::2]))
    return {m.decode(errors="surrogateescape") if isinstance(m, bytes) else str(m): float(s) for m, s in pairs}


def _group_of(stored: bytes) -> str:
    """The group an aggregating task's stored value names ('' if it cannot be read)."""
    try:
        return decode(message_of(stored)).group
    except MalformedMessageError:
        return ""


def state_of(stored: bytes) -> TaskState:
    """The state of a stored value (its first byte)."""
    try:
        return TaskState.from_code(state_char(stored).decode())
    except (KeyError, UnicodeDecodeError):
        raise MalformedMessageError(f"unknown task state {state_char(stored)!r}") from None


def _refusal(verb: str, id: str, state: TaskState) -> TaskStateError:
    allowed = ", ".join(s.value for s in ALLOWED[verb])
    why = {
        A: "it is active (running): cancel it instead" if verb != "run" else "it is active (running)",
        P: "it is already pending" if verb == "run" else "",
        X: "it is already archived" if verb == "archive" else "",
    }.get(state) or f"it is {state.value}"
    return TaskStateError(f"cannot {verb} task {id!r}: {why} ({verb} applies to {allowed} tasks)")


@dataclass(frozen=True)
class _EditChanges:
    """The changes of an edit, checked: the message fields to set (payload, max_retry,
    priority: those given) and the new time, Unix ms (``at_ms``) or ms from now (``in_ms``)."""

    fields: dict[str, Any]
    at_ms: int | None
    in_ms: int | None


def _edit_changes(changes: dict[str, Any]) -> _EditChanges:
    """``changes`` checked (what :meth:`Plans.edit` can change, and each value);
    InvalidArgumentError for the first problem."""
    from ..model import options as opts

    unknown = set(changes) - EDITABLE
    if unknown:
        raise InvalidArgumentError(opts.unknown_options("editable field", unknown, sorted(EDITABLE)))
    if not changes:
        raise InvalidArgumentError("nothing to change: give payload, max_retry, priority, process_at or "
                                   "process_in")
    if "process_at" in changes and "process_in" in changes:
        raise InvalidArgumentError("give process_at or process_in, not both")
    at_ms = int(opts._epoch("process_at", changes["process_at"]) * 1000) if "process_at" in changes else None
    in_ms = int(opts._seconds("process_in", changes["process_in"]) * 1000) if "process_in" in changes else None
    _check_edit_fields(changes)
    fields: dict[str, Any] = {k: changes[k] for k in ("payload", "max_retry", "priority") if k in changes}
    return _EditChanges(fields, at_ms, in_ms)


def _check_edit_fields(changes: dict[str, Any]) -> None:
    """InvalidArgumentError for a new priority or max_retry out of its range."""
    priority = changes.get("priority", codec.DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
            codec.MIN_PRIORITY <= priority <= codec.MAX_PRIORITY):
        raise InvalidArgumentError(f"priority must be an int from {codec.MIN_PRIORITY} (lowest) to "
                                   f"{codec.MAX_PRIORITY} (highest), got {priority!r}")
    retry = changes.get("max_retry")
    if "max_retry" in changes and (isinstance(retry, bool) or not isinstance(retry, int) or retry < 0):
        raise InvalidArgumentError(f"max_retry must be an int >= 0, got {retry!r}")


def _edited(msg: Message, id: str, edit: _EditChanges, max_payload_bytes: int) -> Message:
    """Task ``id``'s message with the edit's fields; InvalidArgumentError for a new payload of a
    unique task (its lock is its type and payload) or one over ``max_payload_bytes``."""
    from ..model import options as opts

    fields = dict(edit.fields)
    if "payload" in fields:
        if msg.unique:
            raise InvalidArgumentError(f"task {id!r} is unique (its lock is its type and payload): its "
                                       "payload cannot change")
        msg = msg.with_(payload=fields.pop("payload"))
        opts._encode_checked(msg, max_payload_bytes)
    return msg.with_(**fields) if fields else msg


def _check_removable(queue: str, st: QueueStats, entries: list[str], procs: int, force: bool) -> None:
    """Refuse to remove a queue that holds tasks, durable processes or scheduler entries (unless
    ``force``), or active tasks (even with ``force``)."""
    if not force:
        if st.size:
            raise QueueNotEmptyError(f"queue {queue!r} holds {st.size} task(s): empty it first or use force")
        if procs:
            raise QueueNotEmptyError(f"queue {queue!r} holds {procs} durable process(es): remove them first "
                                     "or use force")
        if entries:
            raise QueueNotEmptyError(f"queue {queue!r} has {len(entries)} scheduler entr"
                                     f"{'y' if len(entries) == 1 else 'ies'} ({', '.join(entries[:5])}): remove "
                                     "them first or use force")
    if st.active:
        raise TaskStateError(f"queue {queue!r} has {st.active} active task(s): wait for them, or cancel them")


class Plans:
    """The inspector's operations as plans, on one broker (its clock decides "now" for tests)."""

    def __init__(self, broker: Broker, batch: int = BATCH, window: int = WINDOW, cluster: bool = False) -> None:
        self.b = broker
        self.batch = batch
        self.window = window
        self.cluster = cluster
        """Is Redis a Cluster (calls that read several queues then group them by slot)?"""

    # -- small building blocks ---------------------------------------------------------------

    def _now(self) -> Call[int]:
        """Redis's time in ms (or the fake clock's)."""
        fake = self.b.clock.script_now()
        if fake:
            return Call(lambda r: int(fake), command=("ECHO", fake))
        return Call(lambda r: int(r[0]) * 1000 + int(r[1]) // 1000, command=("TIME",))

    @staticmethod
    def _member(queue: str) -> Call[bool]:
        queue_keys(queue)  # validates the name
        return Call(lambda r: bool(int(r)), command=("SISMEMBER", ALL_QUEUES, queue))

    @staticmethod
    def _check(queue: str, known: Any) -> None:
        if not value(known):
            raise QueueNotFoundError(f"queue {queue!r} not found")

    def _known(self, queue: str) -> Plan[None]:
        res = yield [self._member(queue)]
        self._check(queue, res[0])

    # -- queues --------------------------------------------------------------------------------

    def queues(self) -> Plan[list[str]]:
        res = yield [self.b.queues()]
        return list(value(res[0]))

    def stats(self, queue: str) -> Plan[QueueStats]:
        res = yield [self._member(queue), self.b.stats(queue)]
        self._check(queue, res[0])
        return value(res[1])  # type: ignore[no-any-return]

    def all_stats(self) -> Plan[list[QueueStats]]:
        names = yield from self.queues()
        res = yield [self.b.snapshots(batch, fields=STATS_FIELDS) for batch in self._batches(names)]
        return [snap.stats for r in res if not isinstance(r, Exception) for snap, _ in r]

    def _batches(self, names: Sequence[str]) -> list[list[str]]:
        """``names`` in groups of at most :data:`STATS_BATCH` queues read by one stats script call:
        on a Cluster, queues of one slot per group (every key of a call in one slot)."""
        if not self.cluster:
            groups = [list(names)]
        else:
            by_slot: dict[int, list[str]] = {}
            for name in names:
                by_slot.setdefault(key_slot(queue_keys(name).pending), []).append(name)
            groups = list(by_slot.values())
        return [g[i:i + STATS_BATCH] for g in groups for i in range(0, len(g), STATS_BATCH)]

    @staticmethod
    def _info(snap: Snapshot, memory: int | None) -> QueueInfo:
        s = snap.stats
        latency = 0.0
        if snap.oldest is not None:
            enqueued = enqueued_at(message_of(snap.oldest))
            latency = max(0, snap.now_ms - enqueued) / 1000 if enqueued else 0.0
        return QueueInfo(
            s.queue, s.size, s.pending, s.active, s.scheduled, s.retry, s.archived, s.completed, s.paused,
            latency, s.processed_today, s.failed_today, s.processed, s.failed, memory,
            ms_to_datetime(snap.now_ms) or datetime.now(timezone.utc), snap.trimmed, s.aggregating, s.groups,
            s.targeted, s.waiting, s.blocked, s.tenants, **stats_values(snap.settings),
        )

    def queue_info(self, queue: str) -> Plan[QueueInfo]:
        res = yield [self._member(queue), self.b.snapshots([queue], MEMORY_SAMPLES, STATS_FIELDS)]
        self._check(queue, res[0])
        return self._info(*value(res[1])[0])

    def all_queue_info(self, memory: bool = True) -> Plan[list[QueueInfo]]:
        """Every queue's info: the queue list, then one pipelined round trip of stats script calls,
        :data:`STATS_BATCH` queues each (on a Cluster, one slot's queues each)."""
        names = yield from self.queues()
        batches = self._batches(names)
        res = yield [self.b.snapshots(batch, MEMORY_SAMPLES if memory else 0, STATS_FIELDS) for batch in batches]
        infos = {snap.stats.queue: self._info(snap, mem) for r in res for snap, mem in value(r)}
        return [infos[name] for name in names]

    def history(self, queue: str, days: int = 7) -> Plan[list[DailyStats]]:
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_HISTORY_DAYS:
            raise InvalidArgumentError(f"days must be an int from 1 to {MAX_HISTORY_DAYS}, got {days!r}")
        q = queue_keys(queue)
        today = self.b.clock.today()
        dates = [today - timedelta(days=i) for i in range(days)]
        keys = [k for d in dates for k in (q.processed_on(d), q.failed_on(d))]
        res = yield [self._member(queue), Call(lambda r: r, command=("MGET", *keys))]
        self._check(queue, res[0])
        counts = [int(x or 0) for x in value(res[1])]
        return [DailyStats(queue, d, counts[2 * i], counts[2 * i + 1]) for i, d in enumerate(dates)]

    def pause(self, queue: str) -> Plan[bool]:
        yield from self._known(queue)
        res = yield [self.b.pause(queue)]
        return bool(value(res[0]))

    def unpause(self, queue: str) -> Plan[bool]:
        yield from self._known(queue)
        res = yield [self.b.unpause(queue)]
        return bool(value(res[0]))

    # -- tasks ---------------------------------------------------------------------------------

    def list_tasks(self, queue: str, state: TaskState | str, page: int = 1,
                   page_size: int = 30, group: str = "") -> Plan[list[TaskInfo]]:
        st = parse_state(state)
        if group:
            validate_group(group)
            if st is not G:
                raise InvalidArgumentError(f"group applies to aggregating tasks, not {st.value} ones")
        if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= MAX_PAGE_SIZE:
            raise InvalidArgumentError(f"page_size must be an int >= 1 and at most {MAX_PAGE_SIZE}, got {page_size!r}")
        start = page_start(page, page_size)
        res = yield [self._member(queue), self.b.page(queue, st, start, start + page_size - 1, group=group),
                     self._now()]
        self._check(queue, res[0])
        now = value(res[2])
        out = []
        for id, score, stored in value(res[1]):
            if stored is None:
                continue  # its data is gone (being removed right now)
            try:
                out.append(task_from_stored(id, queue, stored, score, now))
            except MalformedMessageError:
                continue
        if st is TaskState.ACTIVE and out:  # running tasks: their latest progress, one more round trip
            q = queue_keys(queue)
            res = yield [Call(lambda r: r, command=("HMGET", q.progress, *(id_arg(t.id) for t in out)))]
            for t, raw in zip(out, value(res[0]) or []):
                t.progress = _progress_value(raw)
        return out

    def groups(self, queue: str) -> Plan[list[GroupInfo]]:
        """The queue's aggregation groups: name, size, when its oldest and newest task joined."""
        q = queue_keys(queue)
        res = yield [self._member(queue), Call(lambda r: r, command=("ZRANGE", q.groups, 0, -1, "WITHSCORES")),
                     Call(lambda r: r, command=("ZRANGE", q.groups_first, 0, -1, "WITHSCORES")),
                     Call(lambda r: r, command=("ZRANGE", q.groups_size, 0, -1, "WITHSCORES"))]
        self._check(queue, res[0])
        newest, first, size = (_scores(value(r)) for r in res[1:])
        return [GroupInfo(name, int(size.get(name, 0)), ms_to_datetime(int(first.get(name, 0))),
                          ms_to_datetime(int(t))) for name, t in sorted(newest.items())]

    def find_tasks(self, queue: str, id_prefix: str = "", task_type: str = "", cursor: int = 0,
                   limit: int = 30, scan: int = SEARCH_SCAN) -> Plan[tuple[int, list[TaskInfo]]]:
        """Tasks of any state whose id starts with ``id_prefix`` and (if given) whose type is
        ``task_type``: HSCAN of the queue's task hash from ``cursor`` (MATCH on the prefix,
        :data:`SEARCH_BATCH` fields a call), until ``limit`` tasks are found or about ``scan``
        fields were looked at. Returns the cursor to go on from (0: the hash was scanned to its
        end) and the tasks found: every match of the batches read, so from ``limit`` to about
        ``limit`` + :data:`SEARCH_BATCH` once enough match (a cursor cannot resume inside a batch;
        a task may be found twice across calls if the hash is resized meanwhile, as SCAN allows).
        Bounded work per call, whatever the queue's size."""
        _check_search(id_prefix, task_type, cursor, limit)
        q = queue_keys(queue)
        pattern = _glob_escape(id_prefix) + "*"
        found: list[TaskInfo] = []
        looked = 0
        while True:
            calls: list[Call[Any]] = [Call(lambda r: r, command=("HSCAN", q.tasks, cursor, "MATCH", pattern,
                                                                 "COUNT", SEARCH_BATCH)), self._now()]
            res = yield calls + [self._member(queue)] if not looked else calls
            if not looked:
                self._check(queue, res[2])
            cursor, batch = _scanned(queue, value(res[0]), value(res[1]))
            found += [t for t in batch if not task_type or t.type == task_type]  # (the whole batch: the cursor
            looked += SEARCH_BATCH                                               # cannot resume inside it)
            if len(found) >= limit or looked >= scan or cursor == 0:
                return cursor, found

    def all_history(self, days: int = 7) -> Plan[dict[str, list[DailyStats]]]:
        """:meth:`history` of every queue: the queue list, then one pipelined round trip (one MGET
        per queue: a queue's day counters share its slot)."""
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_HISTORY_DAYS:
            raise InvalidArgumentError(f"days must be an int from 1 to {MAX_HISTORY_DAYS}, got {days!r}")
        names = yield from self.queues()
        if not names:
            return {}
        today = self.b.clock.today()
        dates = [today - timedelta(days=i) for i in range(days)]
        res = yield [Call(lambda r: r, command=("MGET", *(k for d in dates for k in (queue_keys(n).processed_on(d),
                                                                                   queue_keys(n).failed_on(d)))))
                     for n in names]
        out: dict[str, list[DailyStats]] = {}
        for name, reply in zip(names, res):
            counts = [int(x or 0) for x in value(reply)]
            out[name] = [DailyStats(name, d, counts[2 * i], counts[2 * i + 1]) for i, d in enumerate(dates)]
        return out

    def _read(self, queue: str, id: str) -> Plan[bytes]:
        """A task's stored value; QueueNotFoundError / TaskNotFoundError."""
        res = yield [self._member(queue), self.b.get_task(queue, id)]
        stored = value(res[1])
        if stored is None:
            self._check(queue, res[0])
            raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        return stored  # type: ignore[no-any-return]

    def _action(self, verb: str, queue: str, state: TaskState, items: list[tuple[str, str, int, bytes]],
                window: int) -> Call[list[Acted]]:
        if verb == "delete":
            return self.b.delete_tasks(queue, state, items, window)
        if verb == "archive":
            return self.b.archive_tasks(queue, state, items, window)
        return self.b.run_tasks(queue, state, [item[0] for item in items])

    def act(self, verb: str, queue: str, id: str) -> Plan[None]:
        """delete / run / archive one task. Its state is read first (for the lock key and the
        state check); if it changes before the script runs (another state, or the id reused for
        another task), the script refuses and it is read again."""
        for _ in range(5):
            stored = yield from self._read(queue, id)
            state = state_of(stored)
            if state not in ALLOWED[verb]:
                raise _refusal(verb, id, state)
            if state is M:  # a targeted task: out of its indexes and record too (its running runs finish)
                value((yield [self.b.run_end(queue, id, decode(message_of(stored)),
                                             "D" if verb == "delete" else "X")])[0])  # its error is raised
                return
            if state is G:  # out of its group, which the task's message names
                code = value((yield [self.b.ungroup(queue, id, stored, verb, _group_of(stored))])[0])
                if code == Acted.OK:
                    return
                if code == Acted.NOT_FOUND:
                    raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
                continue
            hint = -1
            while True:
                item = (id, lock_digest(stored), hint, stored)
                res = yield [self._action(verb, queue, state, [item], self.window)]
                code = value(res[0])[0]
                if code != Acted.NOT_LOCATED or hint != -1:
                    break
                hint = yield from self._locate(queue, id, stored)
            if code == Acted.OK:
                return
            if code == Acted.NOT_FOUND:
                raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
            if code == Acted.KEYED:
                raise TaskStateError(f"cannot run {state.value} task {id!r} now: it has a key (key=), and running it "
                                     "would run it beside its key's current task (a scheduled one takes its turn "
                                     "when due; enqueue an archived one again)")
        raise TaskStateError(f"task {id!r} in queue {queue!r} keeps changing state; try again")

    def edit(self, queue: str, id: str, changes: dict[str, Any], max_payload_bytes: int = 1 << 20) -> Plan[TaskInfo]:
        """Change a pending, scheduled or retry task: ``changes`` holds any of ``payload``,
        ``max_retry``, ``process_at`` (datetime or Unix seconds), ``process_in`` (seconds; 0 =
        now), ``priority`` (0..9: a pending task moves to the back of its new priority). Read,
        checked, rewritten only if unchanged since read (else read again)."""
        edit = _edit_changes(changes)
        for _ in range(5):
            stored = yield from self._read(queue, id)
            state = state_of(stored)
            gate = self._editable(queue, id, stored, state)
            msg = _edited(gate.msg, id, edit, max_payload_bytes)
            code = yield from self._write_edit(queue, id, state, stored, gate.store(msg), edit, keyed=bool(msg.key))
            if code == Acted.OK:
                return (yield from self.task_info(queue, id))
            if code == Acted.NOT_FOUND:
                raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        raise TaskStateError(f"task {id!r} in queue {queue!r} keeps changing; try again")

    def _editable(self, queue: str, id: str, stored: bytes, state: TaskState) -> Verified:
        """The message of a task read for an edit, through the trust gate; TaskStateError for a
        task not in an editable state, an error for a signed task and a keyless Inspector (its
        edit could not be signed again), and for a message that does not verify (never re-signed)."""
        if state not in EDIT_STATES:
            why = "it is active (running): cancel it instead" if state is A else f"it is {state.value}"
            raise TaskStateError(f"cannot edit task {id!r}: {why} (edit applies to pending, scheduled and "
                                 "retry tasks)")
        body = message_of(stored)
        if self.b.signer is None and len(body) > codec.TAG_LEN and body[-codec.TAG_LEN:-32] == codec.TAG_PREFIX:
            raise InvalidArgumentError(f"task {id!r} is signed: give the Inspector the signing_key, so that "
                                       "the edited message is signed again")
        gate = trust_gate(self.b.signer, queue, id, body)
        if isinstance(gate, Refused):  # never re-sign what did not verify
            raise type(gate.error)(f"task {id!r} in queue {queue!r} is not edited: {gate.reason} (a message "
                                   "that fails verification is never signed again; delete or archive it)")
        return gate

    def _write_edit(self, queue: str, id: str, state: TaskState, stored: bytes, new: bytes, edit: _EditChanges,
                    keyed: bool) -> Plan[Any]:
        """Run the edit script; for a pending task too deep in its list for the script's window,
        locate it from Python and run the script again with its index. Returns the script's code."""
        hint = -1
        while True:
            # a keyed scheduled task due now takes its turn through its key (the forwarder): the
            # script decides "now" on the Redis clock (keyed=True)
            res = yield [self.b.edit_task(queue, state, id, stored, new, edit.at_ms, edit.in_ms, self.window,
                                          hint, keyed=keyed)]
            code = value(res[0])
            if code != Acted.NOT_LOCATED or hint != -1:
                return code
            hint = yield from self._locate(queue, id, stored)

    def _locate(self, queue: str, id: str, stored: bytes) -> Plan[int]:
        """The index of a pending id deep in a long list, read page by page (each LRANGE small, so
        Redis serves others in between); -2 if it is nowhere in the list. A task with a tenant:
        its seq, read from its tenant's band of the tenant zset the same way."""
        try:
            msg: Message | None = decode(message_of(stored))
        except MalformedMessageError:
            msg = None
        if msg is not None and msg.tenant:
            tail = id.encode()
            start = 0
            while True:
                res = yield [self.b.tenant_band(queue, msg.tenant, msg.priority, start, LOCATE_PAGE)]
                members: list[bytes] = value(res[0])
                for m in members:
                    if m.endswith(tail) and len(m) == len(msg.tenant.encode()) + 18 + len(tail):
                        return int(m[-len(tail) - 16:-len(tail)])
                if len(members) < LOCATE_PAGE:
                    return -2
                start += LOCATE_PAGE
        start = 0
        while True:
            res = yield [self.b.pending_ids(queue, start, start + LOCATE_PAGE - 1)]
            ids: list[str] = value(res[0])
            if id in ids:
                return start + ids.index(id)
            if len(ids) < LOCATE_PAGE:
                return -2
            start += LOCATE_PAGE

    def act_all(self, verb: str, queue: str, state: TaskState | str) -> Plan[int]:
        """delete / run / archive every task in ``state``, ``batch`` tasks per script call, as many
        as the state held when called (tasks arriving meanwhile may be left). Returns how many."""
        st = parse_state(state)
        if st not in ALLOWED[verb]:
            allowed = ", ".join(s.value for s in ALLOWED[verb])
            raise InvalidArgumentError(f"cannot {verb} all {st.value} tasks: {verb} applies to {allowed} tasks")
        if st is G:
            return (yield from self._act_all_grouped(verb, queue))
        if st is M:
            return (yield from self._act_all_targeted(verb, queue))
        res = yield [self._member(queue), self.b.stats(queue)]
        self._check(queue, res[0])
        total: int = getattr(value(res[1]), st.value)
        done = skip = idle = 0
        while done < total and idle < 3:
            res = yield [self.b.page(queue, st, skip, skip + self.batch - 1, values=verb != "run")]
            page = value(res[0])
            if not page:
                break
            # (a pending task with a tenant comes with its seq: the hint that finds it in the tenant zset)
            items = [(id, lock_digest(stored), int(score) if st is P and score is not None else -1, stored or b"")
                     for id, score, stored in page]
            codes: list[Acted] = value((yield [self._action(verb, queue, st, items, self.batch)])[0])
            moved = codes.count(Acted.OK)
            done += moved
            idle = 0 if moved else idle + 1
            if st is not P:  # zset entries whose task is in another state, or changed, or keyed, stay
                skip += codes.count(Acted.WRONG_STATE) + codes.count(Acted.CHANGED) + codes.count(Acted.KEYED)
        return done

    def _act_all_targeted(self, verb: str, queue: str) -> Plan[int]:
        """delete / archive every targeted task, ``batch`` per round trip."""
        done = 0
        while True:
            res = yield [self.b.page(queue, M, 0, self.batch - 1, values=True)]
            page = [(id, stored) for id, _, stored in value(res[0]) if stored and state_of(stored) is M]
            if not page:
                return done
            out = yield [self.b.run_end(queue, id, decode(message_of(stored)), "D" if verb == "delete" else "X")
                         for id, stored in page]
            moved = sum(1 for r in out if not isinstance(r, Exception))
            done += moved
            if not moved:
                for r in out:  # every call refused (an ACL, Redis gone): say why rather than "0 done"
                    value(r)
                return done

    def set_workers(self, queue: str, id: str, workers: Sequence[str] | None) -> Plan[TaskInfo]:
        """Change which workers may run a targeted task (None = any). Runs already taken by workers
        no longer allowed are given back at their next lease renewal."""
        from ..spine.keys import validate_worker_name

        names = None
        if workers is not None:
            if isinstance(workers, str) or not isinstance(workers, Sequence) or not workers:
                raise InvalidArgumentError(f"workers must be a non-empty list of worker names or None, got {workers!r}")
            names = list(dict.fromkeys(validate_worker_name(w) for w in workers))
        for _ in range(5):
            stored = yield from self._read(queue, id)
            if state_of(stored) is not M:
                raise TaskStateError(f"task {id!r} is {state_of(stored).value}: only a targeted task (enqueued "
                                     "with workers= or runs=) has workers to change")
            gate = trust_gate(self.b.signer, queue, id, message_of(stored))
            if isinstance(gate, Refused):  # never re-sign what did not verify
                raise type(gate.error)(f"task {id!r} in queue {queue!r} is not changed: {gate.reason} (a message "
                                       "that fails verification is never signed again; delete or archive it)")
            old = gate.msg
            if names is not None and old.runs > len(names):
                raise InvalidArgumentError(f"task {id!r} needs {old.runs} distinct workers: name at least as many")
            new = old.with_(workers=names)
            code = value((yield [self.b.set_workers(queue, id, stored, old, new, gate.store(new))])[0])
            if code == Acted.OK:
                return (yield from self.task_info(queue, id))
            if code == Acted.NOT_FOUND:
                raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        raise TaskStateError(f"task {id!r} in queue {queue!r} keeps changing; try again")

    def _act_all_grouped(self, verb: str, queue: str) -> Plan[int]:
        """delete / run / archive every aggregating task, group by group, ``batch`` per round trip."""
        done = 0
        for g in (yield from self.groups(queue)):
            while True:
                res = yield [self.b.page(queue, G, 0, self.batch - 1, values=True, group=g.group)]
                page = [(id, stored) for id, _, stored in value(res[0]) if stored]
                if not page:
                    break
                codes = yield [self.b.ungroup(queue, id, stored, verb, g.group) for id, stored in page]
                moved = sum(1 for c in codes if value(c) == Acted.OK)
                done += moved
                if not moved:
                    break
        return done

    def cancel(self, id: str, queue: str | None = None) -> Plan[TaskInfo]:
        """Archive an active task with last_error 'cancelled by an operator' and tell its worker
        (pub/sub) to cancel the handler. ``queue`` None: look in every queue."""
        if queue is None:
            queues = yield from self.queues()
        else:
            yield from self._known(queue)
            queues = [queue]
        where = f"queue {queue!r}" if queue else "any queue"
        for _ in range(5):
            res = yield [self.b.get_task(q, id) for q in queues]
            found = [(q, v) for q, v in zip(queues, res) if isinstance(v, bytes)]
            if not found:
                raise TaskNotFoundError(f"task {id!r} not found in {where}")
            active = [(q, v) for q, v in found if is_active(v)]
            if not active:
                state = state_of(found[0][1])
                raise TaskStateError(f"cannot cancel task {id!r}: it is {state.value}; only an active (running) "
                                     "task can be cancelled (delete or archive it instead)")
            q, stored = active[0]
            new, digest, original = self._cancelled(q, id, message_of(stored))
            token = token_of(stored).decode(errors="surrogateescape")  # written by hand, it may be any bytes
            # the token names the run cancelled: a later run of the same id is not cancelled by it
            notice: bytes = msgpack.packb([q, id, token], unicode_errors="surrogateescape")  # as read
            code = value((yield [self.b.cancel(q, id, token, new, digest, notice, original)])[0])
            if code == Acted.OK:
                return (yield from self.task_info(q, id))
        raise TaskStateError(f"task {id!r} keeps changing state; try again")

    def _cancelled(self, queue: str, id: str, body: bytes) -> tuple[bytes, str, Message | None]:
        """A running task's message rewritten as cancelled, through the trust gate: re-signed only
        if it verifies, else archived unsigned (a malformed one is kept as it is); its lock digest;
        and the message as read (None when malformed), whose key and process the exit needs."""
        gate = trust_gate(self.b.signer, queue, id, body)
        if isinstance(gate, Refused) and isinstance(gate.error, MalformedMessageError):
            return bytes(body), "", None
        cancelled = gate.msg.with_(last_error=CANCELLED, last_failed_at_ms=self.b.clock.now_ms())
        return gate.store(cancelled), gate.msg.lock_digest(), gate.msg

    def remove_queue(self, queue: str, force: bool = False) -> Plan[None]:
        """Remove a queue: it must be empty, or with ``force`` hold no active task (the rest is
        deleted in batches first, unique locks released)."""
        res = yield [self._member(queue), self.b.stats(queue),
                     Call(lambda r: sorted(x.decode(errors="replace") for x in r),
                          command=("HKEYS", queue_keys(queue).cron)), self.b.procs_count(queue)]
        self._check(queue, res[0])
        entries: list[str] = value(res[2])
        _check_removable(queue, value(res[1]), entries, value(res[3]), force)
        if force:
            yield from self._empty_queue(queue, entries)
        yield from self._drop_key_lists(queue)
        code = value((yield [self.b.drop_queue(queue, force)])[0])
        if code == Acted.NOT_EMPTY:
            raise QueueNotEmptyError(f"queue {queue!r} received tasks while being removed; nothing deleted")
        yield [Call(lambda r: r, command=("SREM", ALL_QUEUES, queue)),
               Call(lambda r: r, command=("SREM", CRON_QUEUES, queue))]

    def _empty_queue(self, queue: str, entries: list[str]) -> Plan[None]:
        """Remove a queue's scheduler entries (no scheduler may enqueue into the queue being
        removed), then delete its tasks, state by state."""
        if entries:
            yield [self.b.cron_remove(queue, name) for name in entries]
        # blocked and waiting first: deleting a key's holder (or a parent) first would release
        # the tasks behind it into pending while the queue is being emptied
        for state in (B, W, P, S, R, X, C, G, M):
            yield from self.act_all("delete", queue, state)

    def _drop_key_lists(self, queue: str) -> Plan[None]:
        """Delete the lists of the keys still held (keyed tasks, lua/includes/serial.lua), a page
        of the key index at a time."""
        q = queue_keys(queue)
        cursor = "0"
        while True:
            page = value((yield [Call(lambda r: r, command=("HSCAN", q.keyheld, cursor, "COUNT", 1000))])[0])
            cursor = page[0].decode() if isinstance(page[0], bytes) else str(page[0])
            held = list(page[1]) if isinstance(page[1], dict) else list(page[1][::2])
            if held:
                yield [Call(lambda r: r, command=("DEL", q.key_list(k.decode(errors="surrogateescape"))))
                       for k in held]
            if cursor == "0":
                break

    def task_info(self, queue: str, id: str, verified: bool = False) -> Plan[TaskInfo]:
        """One task's info. ``verified``: read its message through the trust gate first (for a copy
        that is going to be signed: the console's duplicate): SignatureError (or
        MalformedMessageError) for a message that does not verify with this reader's keys, never
        a copy of it; InvalidArgumentError for a signed task read without a key (its copy would be
        unsigned, refused by every keyed worker)."""
        q = queue_keys(queue)
        zsets = (q.lease, q.archived, q.scheduled, q.retry, q.completed)
        res = yield [
            self._member(queue), self.b.get_task(queue, id), self._now(),
            Call(lambda r: r, command=("HGET", q.progress, id_arg(id))),
            Call(lambda r: r, command=("HGET", q.runs, id_arg(id))),
            *(Call(lambda r: r, command=("ZSCORE", z, id_arg(id))) for z in zsets),
            self.b.deps(queue, id), self.b.children_of(queue, id),
            Call(_as_dict, command=("HGETALL", q.ran(id))),
        ]
        stored = value(res[1])
        if stored is None:
            self._check(queue, res[0])
            raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        if verified:
            self._copyable(queue, id, message_of(stored))
        info = task_from_stored(id, queue, stored, _first_score(res[5:10]), value(res[2]))
        info.progress = _progress_value(res[3])
        info.logs = _logs_of(stored)
        _add_runs(info, res[4], res[12])
        _add_links(info, res[10], res[11])
        return info

    def _copyable(self, queue: str, id: str, body: bytes) -> Verified:
        """A task's message read for a copy that is enqueued (and signed) anew, through the trust
        gate: a message that does not verify is never copied (its copy would be signed)."""
        if self.b.signer is None and len(body) > codec.TAG_LEN and body[-codec.TAG_LEN:-32] == codec.TAG_PREFIX:
            raise InvalidArgumentError(f"task {id!r} is signed: give the signing_key (asynqpy web "
                                       "--signing-key-file), so that its copy is signed too")
        gate = trust_gate(self.b.signer, queue, id, body)
        if isinstance(gate, Refused):  # never sign a copy of what did not verify
            raise type(gate.error)(f"task {id!r} in queue {queue!r} is not copied: {gate.reason} (a message "
                                   "that fails verification is never signed again; delete or archive it)")
        return gate

    def task_logs(self, queue: str, id: str) -> Plan[list[LogLine]]:
        res = yield [self._member(queue), self.b.get_task(queue, id)]
        stored = value(res[1])
        if stored is None:
            self._check(queue, res[0])
            raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        return _logs_of(stored)

    # -- servers -------------------------------------------------------------------------------

    def servers(self) -> Plan[list[ServerInfo]]:
        now = self.b.clock.now_ms()
        res = yield [
            Call(lambda r: r, command=("ZREMRANGEBYSCORE", SERVERS, "-inf", now - 60_000)),
            Call(lambda r: [x.decode() for x in r], command=("ZRANGE", SERVERS, now, "+inf", "BYSCORE")),
        ]
        ids: list[str] = value(res[1])
        if not ids:
            return []
        raws = yield [Call(lambda r: r, command=("GET", server_info(i))) for i in ids]
        out = []
        for raw in raws:
            if raw is None or isinstance(raw, Exception):
                continue
            try:
                out.append(server_record.unpack(raw))
            except (ValueError, KeyError, TypeError, msgpack.UnpackException):
                continue
        return sorted(out, key=lambda s: (s.host, s.pid, s.id))


def _first_score(replies: Sequence[Any]) -> float | None:
    """The score of the first sorted set that holds the task (None: none does)."""
    return next((float(s) for s in replies if s is not None and not isinstance(s, Exception)), None)


def _add_runs(info: TaskInfo, runs: Any, ran: Any) -> None:
    """A targeted task's runs (its record while running, the final record kept with it once
    finished) and the results of its runs that succeeded. ``runs``: the reply of HGET runs;
    ``ran``: the task's kept results (a dict), read for a targeted task only."""
    kept = ran if isinstance(ran, dict) and (info.workers is not None or info.runs_wanted > 1) else {}
    if info.state is M and isinstance(runs, bytes):
        record = parse_runs(runs)
        info.runs, info.retried = record.states, record.failures
    elif info.state in (C, X) and isinstance(kept.get(b""), bytes):
        record = parse_runs(kept[b""])  # a finished targeted task's final record, kept with it
        info.runs, info.retried = record.states, record.failures
    if info.state in (M, C, X):  # (only runs the record says succeeded: not an earlier task's, same id)
        info.run_results = {name: got for name, got in run_results(kept).items()
                            if info.runs.get(name) == "succeeded"}


def _add_links(info: TaskInfo, deps: Any, children: Any) -> None:
    """A task's workflow links: the parents it waits on (with its policy) and its children."""
    if isinstance(deps, Record) and deps.policy:
        info.parents, info.on_parent_failure = list(deps.parents), deps.policy
    if isinstance(children, list):
        info.children = children


def _progress_value(raw: Any) -> Any:
    """A stored progress value, decoded (None when there is none; a hand-written value that is not
    msgpack stays bytes)."""
    if not isinstance(raw, bytes):
        return None
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - shown as it is
        return raw
