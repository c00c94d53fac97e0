"""The broker's vocabulary: a script call (:class:`Call`, :func:`script_call`), the arguments and
the key groups every call builds, the reply codes and the values they are read into (enums such as
:class:`Acted`, :class:`Done`, :class:`QueueStats`), and :class:`BrokerBase`, what every part of the
broker shares (its clock and signer). The calls themselves are :class:`~asynqpy.core.spine.broker.Broker`'s
methods (a task's life there; :mod:`.feature_calls`, :mod:`.operator_calls`: the features' and the
operator's). No I/O (docs/internals-spine.md "Reply codes in the broker")."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from typing import Any, Generic, TypeVar

from ..model import codec
from ..model.clock import Clock
from ..model.codec import Message
from ..model.errors import (
    AsynqpyError,
    DuplicateTaskError,
    InvalidArgumentError,
    LeaseLostError,
    TaskNotFoundError,
    ThrottledError,
    reply_error,
)
from ..model.task import TaskState
from ..security.signing import Signer
from .keys import QueueKeys
from .scripts import bind, group_keys, load_scripts

T = TypeVar("T")

DAY_TTL_S = 90 * 24 * 3600
"""Daily counters are kept 90 days."""

# Reply codes shared by the scripts (see each script's header).
OK = 1
NOT_FOUND = 0
DUPLICATE = -1
ID_CONFLICT = -2
LEASE_LOST = -3
LEASE_ALIVE = -4
WRONG_STATE = -5
NOT_LOCATED = -6  # (operator scripts) a pending id not found near either end; (cancel) re-leased since read
NOT_EMPTY = -7
CHANGED = -8  # (operator scripts) the task's stored value changed since the caller read it
KEYED = -9  # (run_tasks) a keyed task: running it now would run it beside its key's current task

MAX_DELAY_MS = 100 * 365 * 24 * 3600 * 1000


class Acted(enum.IntEnum):
    """An operator script's answer for one task (delete_tasks, archive_tasks, run_tasks, edit_task,
    ungroup, set_workers, cancel, aggregate, drop, fail_waiting, drop_queue): the codes above, named.
    Only the broker reads a raw reply; other modules compare these members."""

    OK = OK
    NOT_FOUND = NOT_FOUND
    DUPLICATE = DUPLICATE
    ID_CONFLICT = ID_CONFLICT
    LEASE_LOST = LEASE_LOST
    LEASE_ALIVE = LEASE_ALIVE
    WRONG_STATE = WRONG_STATE
    NOT_LOCATED = NOT_LOCATED
    NOT_EMPTY = NOT_EMPTY
    CHANGED = CHANGED
    KEYED = KEYED


def _acted(reply: list[Any]) -> list[Acted]:
    return [Acted(int(x)) for x in reply]


class Watched(enum.IntEnum):
    """``watch``'s answer for a task that has not finished (a finished one's stored value comes as
    bytes instead)."""

    NOT_FOUND = 0
    WAITING = 1


class Registered(enum.IntEnum):
    """``register_child``'s answer: how the parent stands (a completed one's stored message comes
    with it, for its result)."""

    GONE = 0
    LIVE = 1
    COMPLETED = 2
    ARCHIVED = 3
    NOT_A_PARENT = 4  # in an aggregation group, or targeted: it ends through other tasks


class Rewrapped(enum.IntEnum):
    """``rewrap``'s answer (key rotation's rewrite of one stored value)."""

    CHANGED = 0  # changed since read, or gone: left for the next pass
    REWRITTEN = 1
    ACTIVE = -5  # an active task (its worker rewrites it), or the value's state differs


class Resolved(enum.IntEnum):
    """``resolve``'s answer: what one parent's end did to the child."""

    NOTHING = 0  # no such child, or this end was delivered already
    RELEASED = 1  # pending now
    WAITING = 2  # still waiting on other parents
    CANCEL = 3  # a parent failed and its policy is cancel: the propagator archives it (fail_waiting)
    SCHEDULED = 4  # released, but its due time is ahead


_AFTER_STATES = {1: TaskState.PENDING, 2: TaskState.WAITING, 3: TaskState.ARCHIVED, 4: TaskState.SCHEDULED}
"""enqueue_after.lua's codes: the state the new task is in."""
_KEYED_STATES = {1: TaskState.PENDING, 2: TaskState.BLOCKED}
"""enqueue_keyed.lua's and key_gate.lua's codes: the state the task is in (key_gate's 0: none, it changed)."""
"""The longest delay any script is given (100 years, the longest duration an option takes): a
retry policy returning more is capped to it, so a due time stays an exact integer in Lua and in
the script's reply (1e19 ms overflowed Redis's integer reply)."""


def delay_arg(delay_ms: float) -> int:
    """A delay as a script argument: whole milliseconds from 0 to :data:`MAX_DELAY_MS` (a NaN is 0)."""
    if not delay_ms > 0:  # also NaN
        return 0
    return MAX_DELAY_MS if delay_ms >= MAX_DELAY_MS else int(delay_ms)


def token_arg(token: str | bytes) -> bytes | str:
    """A lease token as a script argument: a worker's own (text), or the bytes the recoverer read."""
    return token if isinstance(token, bytes) else id_arg(token)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One script call (``script`` set) or plain command (``command`` set) and its reply parser."""

    parse: Callable[[Any], T]
    script: str = ""
    keys: tuple[str, ...] = ()
    args: tuple[Any, ...] = ()
    command: tuple[Any, ...] = ()


def script_call(script: str, parse: Callable[[Any], T], /, **named: Any) -> Call[T]:
    """The call of Lua script ``script`` with its keys and arguments given by the names its header
    declares (``lua/<script>-N.lua``; a variadic tail as a sequence), read with ``parse``. Raises
    TypeError when a name is missing or unexpected (:func:`asynqpy.core.spine.scripts.bind`)."""
    keys, args = bind(script, named)
    return Call(parse, script, keys, args)


@lru_cache(maxsize=4096)
def _q(q: QueueKeys, names: str) -> Mapping[str, str]:
    """Keys of queue ``q`` by name, for script headers that name them as :class:`QueueKeys` does
    (cached: the same few sets are built on every call)."""
    return {n: getattr(q, n) for n in names.split()}


def _keylist(q: QueueKeys, key: str) -> str:
    """A task's key's list, or the queue's placeholder when it has no key."""
    return q.key_list(key) if key else q.placeholder


def _group(q: QueueKeys, name: str) -> Mapping[str, str]:
    return {n: getattr(q, n) for n in group_keys(name)}


@lru_cache(maxsize=1024)
def pending_keys(q: QueueKeys) -> Mapping[str, str]:
    """The pending group (core/spine/scripts.py KEY_GROUPS, a header's ``KEY @pending``): the keys that
    hold a queue's pending tasks, which every script that makes a task pending, takes one out of
    pending or counts them names together (lua/includes/priority ``pk``)."""
    return _group(q, "pending")


@lru_cache(maxsize=1024)
def event_keys(q: QueueKeys) -> Mapping[str, str]:
    """The events group (``KEY @events``): the queue's event stream and its settings hash (the cap)."""
    return _group(q, "events")


@lru_cache(maxsize=1024)
def serial_keys(q: QueueKeys) -> Mapping[str, str]:
    """The serial group (``KEY @serial``): the keys that release a keyed task's key to its next task
    (lua/includes/serial)."""
    return _group(q, "serial")


@lru_cache(maxsize=1024)
def exit_keys(q: QueueKeys) -> Mapping[str, str]:
    """The exit group (``KEY @exit``): the keys every script through which a task ends shares
    (lua/includes/exit.lua): its event, its workflow children told (includes/flow) and its key
    released (the serial group)."""
    return _group(q, "exit")


GROUP_KEYS: Mapping[str, Callable[[QueueKeys], Mapping[str, str]]] = {
    "pending": pending_keys, "events": event_keys, "serial": serial_keys, "exit": exit_keys}
"""The broker's function for each key group of core/spine/scripts.py KEY_GROUPS (a test checks both agree)."""


@dataclass(frozen=True)
class Dequeued:
    """What one dequeue call returned."""

    now_ms: int
    remaining: int  # pending tasks left in the queue; -1 = the queue is paused
    tasks: list[tuple[str, bytes]] = field(default_factory=list)  # (id, encoded message)
    wait_ms: int = 0  # > 0: the queue's limits held tasks back; try again in this many ms
    slot_bound: bool = False  # held back by the concurrency limit: a slot freed sooner ends the wait
    procs: Mapping[str, tuple[str, list[Any]]] = field(default_factory=dict)
    """The process inputs taken, by id, with their process read in the same call (``pages`` >= 0:
    lua/includes/dq_procs): (process id, [record, first event id, event, ...], or [] for none)."""


def parse_dequeued(reply: list[Any]) -> Dequeued:
    """A dequeue's reply (lua/dequeue.lua): {now, remaining, wait, id, msg, ...} and, when process
    inputs came with their processes, one more element listing them (includes/dq_procs)."""
    procs: dict[str, tuple[str, list[Any]]] = {}
    end = len(reply)
    if (end - 3) % 2:
        end -= 1
        for one in reply[end]:
            procs[_s(one[0])] = (_s(one[1]), list(one[2:]))
    items = [(_s(reply[i]), reply[i + 1]) for i in range(3, end, 2)]
    wait = int(reply[2])
    return Dequeued(int(reply[0]), int(reply[1]), items, abs(wait), wait < 0, procs)


@dataclass(frozen=True)
class Expired:
    """Active tasks whose lease expired (for the recoverer)."""

    now_ms: int
    next_ms: int  # ms until the next lease expires, -1 = none
    tasks: list[tuple[str, bytes | None]]  # (id, stored value or None when its data is gone)
    outbox: int = 0  # entries in the queue's outbox (parents' ends not yet delivered to children)


@dataclass(frozen=True)
class SweepLease:
    """A reply of lua/sweep.lua: ``code`` 1 = the caller holds the sweep's lease (``cursors``:
    where to go on, after a claim), 0 = it does not (ask again in ``ms``), 2 = the sweep ended
    (the next is due in ``ms``)."""

    code: int
    ms: int
    cursors: dict[str, str]

    @classmethod
    def of(cls, r: list[Any]) -> SweepLease:
        return cls(int(r[0]), int(r[1]), {_s(r[i]): _s(r[i + 1]) for i in range(2, len(r) - 1, 2)})


@dataclass(frozen=True)
class QueueStats:
    """Counts per state and counters of one queue, read atomically."""

    queue: str
    pending: int
    active: int
    scheduled: int
    retry: int
    archived: int
    completed: int
    paused: bool
    processed: int
    failed: int
    processed_today: int
    failed_today: int
    aggregating: int = 0
    groups: int = 0
    targeted: int = 0
    waiting: int = 0
    blocked: int = 0
    tenants: int = 0  # tenants with pending tasks (enqueue(..., tenant=))

    @property
    def size(self) -> int:
        """Tasks in the queue, in any state."""
        return (self.pending + self.active + self.scheduled + self.retry + self.archived + self.completed
                + self.aggregating + self.targeted + self.waiting + self.blocked)


@dataclass(frozen=True)
class Snapshot:
    """What queue_info is built from: the stats, the trimmed counter, Redis's time (ms) and the
    stored value of the oldest pending task (None when none)."""

    stats: QueueStats
    trimmed: int
    now_ms: int
    oldest: bytes | None
    settings: tuple[Any, ...] = ()
    """The conf fields the caller asked for (``fields``: the queue settings'), as stored (None:
    absent); core/spine/queue_settings.py decodes them."""


def _queue_stats(queue: str, r: list[Any]) -> QueueStats:
    v = [int(x) for x in r[:11]]
    return QueueStats(queue, v[0], v[1], v[2], v[3], v[4], v[5], bool(v[6]), v[7], v[8], v[9], v[10], int(r[14]),
                      int(r[15]), int(r[16]), int(r[17]), int(r[18]), int(r[20]))


STATS_WIDTH = 21
"""Values per queue in the stats script's reply (lua/stats.lua), before the conf fields asked for."""


def _snapshot(queue: str, r: list[Any]) -> Snapshot:
    return Snapshot(_queue_stats(queue, r), int(r[11]), int(r[12]), r[13] or None,
                    tuple(v or None for v in r[STATS_WIDTH:]))


def _stats_keys(q: QueueKeys, day: date) -> tuple[str, ...]:
    """The keys of a queue the stats script reads, in its header's order (``day``: today): an item of
    its ``more... {*}`` tail."""
    days = {"processed_day": q.processed_on(day), "failed_day": q.failed_on(day)}
    return tuple(days[n] if n in days else getattr(q, n) for n in load_scripts()["stats"].keys)


def container_of(q: QueueKeys, state: TaskState, group: str = "") -> str:
    """The list or zset holding a queue's tasks in ``state`` (active tasks: the lease zset;
    aggregating tasks: their ``group``'s zset)."""
    if state is TaskState.AGGREGATING:
        if not group:
            raise InvalidArgumentError("aggregating tasks are listed per group: give the group")
        return q.group(group)
    return {
        TaskState.PENDING: q.pending, TaskState.ACTIVE: q.lease, TaskState.SCHEDULED: q.scheduled,
        TaskState.RETRY: q.retry, TaskState.ARCHIVED: q.archived, TaskState.COMPLETED: q.completed,
        TaskState.TARGETED: q.targeted, TaskState.WAITING: q.waiting, TaskState.BLOCKED: q.blocked,
    }[state]


def _s(v: bytes | str) -> str:
    """A name read from Redis. Ids written by hand may be any bytes: those that are not UTF-8 keep
    them as surrogates, and :func:`id_arg` turns them back into the same bytes."""
    return v.decode(errors="surrogateescape") if isinstance(v, bytes) else v


def id_arg(id: str) -> bytes:
    """A task id (or lease token) as a command argument: the bytes it was read from, see :func:`_s`."""
    try:
        return id.encode(errors="surrogateescape")
    except (AttributeError, UnicodeEncodeError):  # not a str, or a surrogate _s cannot have made
        raise InvalidArgumentError(f"a task id is a string of text, got {id!r}") from None


@dataclass(frozen=True)
class Done:
    """One task of a batched acknowledgement (:meth:`Broker.done_many`): its id, the lease token
    it was dequeued with, its message, the outcome for a waiting client (b'' = none) and whether
    its run wrote progress (only then is there a progress entry to clear: an attempt starts with
    none, as every script that ends an attempt clears it)."""

    id: str
    token: str
    msg: Message
    outcome: bytes = b""
    progressed: bool = True
    result: bytes = b""  # the result (msgpack), b'' = None: for the task's children, if it has any


@dataclass(frozen=True)
class Commit:
    """One process input of a batched commit (:meth:`Broker.proc_commit_many`), built by
    :meth:`Broker.commit`: its id and process id, its script arguments (those naming keys filled
    in by the batch), the inbox of its waiting caller and its key's list ('' = none)."""

    id: str
    pid: str
    args: list[Any]
    inbox: str = ""
    keylist: str = ""


def _commit_code(id: str, pid: str) -> Callable[[Any], int]:
    """Parser of one input's code in proc_commit's reply: :data:`CHANGED` (its process changed since
    it was read) raises LeaseLostError, the rest as :func:`_finish_code`."""
    parse = _finish_code("proc_commit", id, pid)

    def parse_commit(reply: Any) -> int:
        if reply == CHANGED:
            raise LeaseLostError(f"proc_commit: process {pid} changed since input {id} read it; "
                                 "nothing written (the input runs again after its lease)")
        return parse(reply)

    return parse_commit


class Forwarded(tuple):  # type: ignore[type-arg]
    """What forward returns: (moved, ms until the next due task or -1), and ``keyed``: the due
    keyed tasks it left in place, each ``(id, key)``, for :meth:`Broker.key_gate`."""

    keyed: list[tuple[str, str]]

    @classmethod
    def of(cls, moved: int, next_ms: int, keyed: list[tuple[str, str]]) -> Forwarded:
        f = cls((moved, next_ms))
        f.keyed = keyed
        return f


class Finished(int):
    """A finishing script's success (equal to 1): ``late`` holds the inbox ids of waiters that
    started waiting after the enqueue, to notify with :meth:`Broker.reply` (usually empty)."""

    late: tuple[str, ...] = ()
    told: bool = False  # tasks waiting on it (workflow children) were told: run the propagator
    watchers: tuple[str, ...] = ()  # proc_commit: inboxes of clients waiting for the process ('@' + id)
    process: str = ""  # ... and its id (a wake-up is pushed to each: core/results/plans run_waiter)

    @classmethod
    def with_late(cls, late: bytes, process: str = "") -> Finished:
        f = cls(OK)
        words = late.decode().split()
        f.told = "!" in words
        f.late = tuple(w for w in words if w != "!" and not w.startswith("@"))
        f.watchers = tuple(w[1:] for w in words if w.startswith("@"))
        f.process = process
        return f


def _event_text(text: str) -> str:
    """An error as an event field: its first line, at most 200 characters (the task keeps it all)."""
    line = text.split("\n", 1)[0]
    return line if len(line) <= 200 else line[:199] + "…"


def _is_plain(d: Done) -> bool:
    """A success that needs nothing but its end: no lock, waiter, progress, result or key."""
    return not d.outcome and not d.progressed and not d.result and not d.msg.key and not d.msg.lock_digest()


def _done_batch(q: QueueKeys, items: Sequence[Done]
                ) -> tuple[list[Any], list[str], int, Callable[[Any], list[int | Exception]]]:
    """done.lua's batch inputs for ``items`` (lua/done_dequeue.lua's too): its items, its extra keys
    (locks, inboxes, keys' lists, named by index), how many items are plain, and its reply's parser."""
    extra: dict[str, int] = {}  # the batch's own keys, after the fixed ones: key -> j

    def index(key: str) -> int:
        return extra.setdefault(key, len(extra) + 1)

    args, order, plain = _done_args(q, items, index)
    parsers = [_finish_code("done", d.id) for d in items]

    def parse(reply: list[Any] | int) -> list[int | Exception]:
        if isinstance(reply, int):  # every item done (lua/done.lua: the count, not a list of 1s)
            reply = [1] * reply
        out: list[int | Exception] = [0] * len(order)
        for n, r in zip(order, reply):
            try:
                out[n] = parsers[n](r)
            except AsynqpyError as exc:
                out[n] = exc
        return out

    return args, list(extra), plain, parse


def _done_args(q: QueueKeys, items: Sequence[Done], index: Callable[[str], int]) -> tuple[list[Any], list[int], int]:
    """The done script's items (lua/done.lua): the plain ones first in the short form (id, token,
    attempt), then the others (10 arguments each); with the order they go in (reply k is the
    item order[k]'s) and how many are plain. An id named twice keeps the items' order (its first
    entry is the one that ends the task): every item then goes in the long form."""
    twice = len({d.id for d in items}) < len(items)
    plain: list[int] = []
    full: list[int] = []
    for n, d in enumerate(items):
        (plain if not twice and _is_plain(d) else full).append(n)
    args: list[Any] = []
    for n in plain:
        d = items[n]
        args += [id_arg(d.id), d.token, d.msg.retried + 1]
    for n in full:
        d = items[n]
        digest = d.msg.lock_digest()
        args += [id_arg(d.id), d.token, d.msg.retried + 1, index(q.lock(digest)) if digest else 0,
                 index(q.inbox(d.msg.reply_to)) if d.outcome and d.msg.reply_to else 0, d.outcome,
                 1 if d.progressed else 0, d.result, index(q.key_list(d.msg.key)) if d.msg.key else 0,
                 d.msg.key]
    return args, plain + full, len(plain)


def _finish_code(op: str, id: str, pid: str = "") -> Callable[[Any], int]:
    """Parser for the finishing scripts: >= 1 ok; 0 / -3 / -4 raise. The done, complete and
    archive scripts answer a string (the late waiters' inboxes) for success: a :class:`Finished`
    (``pid``: the process whose waiters it may name, proc_commit's and archive's)."""

    def parse(reply: Any) -> int:
        if isinstance(reply, bytes):
            return Finished.with_late(reply, pid)
        code = int(reply)
        if code >= OK:
            return code
        if code == NOT_FOUND:
            raise TaskNotFoundError(f"{op}: task {id} not found")
        if code == LEASE_LOST:
            raise LeaseLostError(f"{op}: lease on task {id} is no longer held; write refused")
        if code == LEASE_ALIVE:
            raise LeaseLostError(f"{op}: lease on task {id} is still alive; recoverer backs off")
        raise AsynqpyError(f"{op}: unexpected reply {code}")

    return parse


def _new_task_code(id: str, queue: str, mode: str = "") -> Callable[[Any], Any]:
    """The reply parser of the scripts storing a new task: the code (or due time; with ``mode``
    'd' a ``(due, replaced id)`` pair), or the typed refusal."""
    def parse(reply: Any) -> Any:
        if isinstance(reply, list):
            if mode == "d" and len(reply) == 2:
                return int(reply[0]), _text(reply[1])
            holder, left = _text(reply[1]), max(0, int(reply[2])) / 1000
            if mode == "t":
                raise ThrottledError(f"throttled: task {holder!r} took this key in queue {queue!r}; "
                                     f"the window ends in {left:.3f} s", holder, left)
            raise DuplicateTaskError(f"a unique task with this key is live in queue {queue!r}: {holder!r}",
                                     holder, left)
        code = int(reply)
        if code < 0 and (refusal := reply_error(code, queue, id)):
            raise refusal
        return code

    return parse


def _batch_codes(queue: str, count: int, reply: Any) -> list[int]:
    """A batch script's codes, or its refusal of the whole batch (a code of the reply-code table,
    core/model/errors.py REPLY_ERRORS, instead of a list: the producer entry's admission, lua/includes/admit)."""
    if not isinstance(reply, list):
        raise reply_error(int(reply), queue, "", count) or AsynqpyError(f"unexpected reply {reply!r}")
    return [int(x) for x in reply]


TRIM_PER_CALL = 100
"""The most archived tasks one ``trim`` call deletes (lua/includes/trim.lua)."""

ARCHIVED_RUNS_TTL_MS = 90 * 24 * 3600 * 1000
"""How long an archived targeted task's runs record is kept (the default ``archive_max_age``), and
the longest its runs' results wait for the task to finish."""


def _targets(q: QueueKeys, workers: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """A targeted task's index zsets and the wake lists of the workers it names."""
    if workers is None:
        return [q.targeted_any], []
    return [q.targeted_for(w) for w in workers], [q.wake_for(w) for w in workers]


def _allowed(workers: Sequence[str] | None) -> str:
    return "*" if workers is None else ",".join(workers)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _one(batch: Call[list[Any]]) -> Call[Any]:
    """A batch call of one item as the call of that item: its reply, or its error raised."""

    def parse(reply: Any) -> Any:
        res = batch.parse(reply)[0]
        if isinstance(res, Exception):
            raise res
        return res

    return Call(parse, batch.script, batch.keys, batch.args)


class BrokerBase:
    """What every part of the broker shares: ``clock`` decides the ``now`` scripts use; ``signer``
    (optional) signs every message written (see :mod:`asynqpy.core.security.signing`); ``ring``
    (optional, a :class:`~asynqpy.core.security.encryption.KeyRing`) is what the callers of the
    broker encrypt payloads, results and logs with, and decrypt them (docs/encryption.md)."""

    def __init__(self, clock: Clock | None = None, signer: Signer | None = None, ring: Any = None) -> None:
        self.clock = clock or Clock()
        self.signer = signer
        self.ring = ring

    def seal(self, queue: str, id: str, msg: Message, data: bytes | None = None, sign: bool = True) -> bytes:
        """The message as stored: encoded (unless ``data`` already is), with its tag when signing.
        For messages the caller made, or verified itself (a worker's task after
        :func:`~asynqpy.core.security.signing.run_message`); a message read from Redis to be written again
        goes through :func:`~asynqpy.core.security.signing.trust_gate` instead."""
        data = data or codec.encode(msg)
        return data if self.signer is None or not sign else self.signer.seal(queue, id, data)

    def _day_keys(self, q: QueueKeys) -> tuple[str, str]:
        day = self.clock.today()
        return q.processed_on(day), q.failed_on(day)
