"""The Inspector's values and building blocks (sans I/O): the limits of one call, :class:`QueueInfo`,
:class:`GroupInfo`, :class:`DailyStats`, reading a stored task into a :class:`TaskInfo`, the checks of an
operator's edit, and :class:`PlansBase`, what every plan of :mod:`.inspection` and :mod:`.actions`
shares (the broker, the batch sizes, the queue checks)."""

from __future__ import annotations

import binascii
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
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
from ..spine.broker import (
    Broker,
    Call,
    QueueStats,
)
from ..spine.keys import ALL_QUEUES, queue_keys
from ..spine.stored import message_of, state_char
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


class PlansBase:
    """What the Inspector's plans share: the broker, the batch sizes and the queue checks."""

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

    def _read(self, queue: str, id: str) -> Plan[bytes]:
        """A task's stored value; QueueNotFoundError / TaskNotFoundError."""
        res = yield [self._member(queue), self.b.get_task(queue, id)]
        stored = value(res[1])
        if stored is None:
            self._check(queue, res[0])
            raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        return stored  # type: ignore[no-any-return]
