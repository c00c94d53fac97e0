"""The broker: one method per Lua script, the only place that builds script calls and turns script
replies (small integer codes) into results, enums (:class:`Acted`, ...) or typed errors.

Each call names its keys and arguments as the script's header declares them
(:func:`script_call`; :mod:`asynqpy.core.scripts` binds the names to positional KEYS and ARGV and
refuses a missing or extra one). Queue keys are picked by their :class:`QueueKeys` names
(``_q``); the keys every end path shares come from :func:`exit_keys`, built here once.

The broker does no I/O. Each method returns a :class:`Call`, a description of one script call and
of how to read its reply; :mod:`asynqpy.executor` runs calls on a sync or an async Redis client
(one at a time or pipelined). Sync and async users thus share every line of broker logic.
"""

from __future__ import annotations

import base64
import enum
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from typing import Any, Generic, TypeVar

from . import codec, process, workflow
from .clock import Clock
from .codec import Message
from .deploy import VERSION_BAND
from .errors import (
    AsynqpyError,
    DuplicateTaskError,
    InvalidArgumentError,
    LeaseLostError,
    QueueFullError,
    TaskIdConflictError,
    TaskNotFoundError,
    ThrottledError,
)
from .keys import ALL_QUEUES, CANCEL_CHANNEL, QueueKeys, known_queues, queue_keys
from .scripts import bind, group_keys, load_scripts
from .signing import Signer
from .stored import key_of, lock_digest
from .task import TaskState

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
QUEUE_FULL = -10  # (the producer entry scripts) the queue or the task's tenant is at its cap (lua/includes/cap)

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
    TypeError when a name is missing or unexpected (:func:`asynqpy.core.scripts.bind`)."""
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
    """The pending group (core/scripts.py KEY_GROUPS, a header's ``KEY @pending``): the keys that
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
"""The broker's function for each key group of core/scripts.py KEY_GROUPS (a test checks both agree)."""


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
    cap: tuple[bytes | None, int, int] = (None, 0, 0)
    """The queue's cap as stored ('N r|d', lua/includes/cap.lua; None: none) and its counters of
    refused and dropped tasks."""


def _queue_stats(queue: str, r: list[Any]) -> QueueStats:
    v = [int(x) for x in r[:11]]
    return QueueStats(queue, v[0], v[1], v[2], v[3], v[4], v[5], bool(v[6]), v[7], v[8], v[9], v[10], int(r[14]),
                      int(r[15]), int(r[16]), int(r[17]), int(r[18]), int(r[20]))


STATS_WIDTH = 24
"""Values per queue in the stats script's reply (lua/stats.lua)."""


def _snapshot(queue: str, r: list[Any]) -> Snapshot:
    return Snapshot(_queue_stats(queue, r), int(r[11]), int(r[12]), r[13] or None, (r[21] or None, int(r[22]),
                                                                                    int(r[23])))


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
    parse = _finish_code("proc_commit", id)

    def parse_commit(reply: Any) -> int:
        if reply == CHANGED:
            raise LeaseLostError(f"proc_commit: process {pid} changed since input {id} read it; "
                                 "nothing written (the input runs again after its lease)")
        return parse(reply)

    return parse_commit


class Forwarded(tuple):  # type: ignore[type-arg]
    """What forward returns: (moved, ms until the next due task or -1), and ``keyed``: the due
    keyed tasks it left in place, for :meth:`Broker.key_gate`."""

    keyed: list[str]

    @classmethod
    def of(cls, moved: int, next_ms: int, keyed: list[str]) -> Forwarded:
        f = cls((moved, next_ms))
        f.keyed = keyed
        return f


class Finished(int):
    """A finishing script's success (equal to 1): ``late`` holds the inbox ids of waiters that
    started waiting after the enqueue, to notify with :meth:`Broker.reply` (usually empty)."""

    late: tuple[str, ...] = ()
    told: bool = False  # tasks waiting on it (workflow children) were told: run the propagator

    @classmethod
    def with_late(cls, late: bytes) -> Finished:
        f = cls(OK)
        words = late.decode().split()
        f.told = "!" in words
        f.late = tuple(w for w in words if w != "!")
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


def _finish_code(op: str, id: str) -> Callable[[Any], int]:
    """Parser for the finishing scripts: >= 1 ok; 0 / -3 / -4 raise. The done, complete and
    archive scripts answer a string (the late waiters' inboxes) for success: a :class:`Finished`."""

    def parse(reply: Any) -> int:
        if isinstance(reply, bytes):
            return Finished.with_late(reply)
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
        if code == ID_CONFLICT:
            raise TaskIdConflictError(f"a live task with id {id!r} exists in queue {queue!r}")
        if code == QUEUE_FULL:
            raise queue_full(queue, 1)
        return code

    return parse


def queue_full(queue: str, count: int) -> QueueFullError:
    """The refusal of a producer call at the cap of ``queue`` or of a tenant (lua/includes/cap)."""
    return QueueFullError(f"queue {queue!r} is full: its cap (or its tenant's) refused {count} task(s) "
                          f"(overflow 'reject'; nothing was stored)", queue, count)


def _batch_codes(queue: str, count: int, reply: Any) -> list[int]:
    """A batch script's codes, or its refusal at a cap (the code QUEUE_FULL instead of a list)."""
    if not isinstance(reply, list):
        if int(reply) == QUEUE_FULL:
            raise queue_full(queue, count)
        raise AsynqpyError(f"unexpected reply {reply!r}")
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


class Broker:
    """Builds the calls of every state transition. ``clock`` decides the ``now`` scripts use;
    ``signer`` (optional) signs every message written (see :mod:`asynqpy.signing`)."""

    def __init__(self, clock: Clock | None = None, signer: Signer | None = None) -> None:
        self.clock = clock or Clock()
        self.signer = signer

    def seal(self, queue: str, id: str, msg: Message, data: bytes | None = None, sign: bool = True) -> bytes:
        """The message as stored: encoded (unless ``data`` already is), with its tag when signing.
        For messages the caller made, or verified itself (a worker's task after
        :func:`~asynqpy.core.signing.run_message`); a message read from Redis to be written again
        goes through :func:`~asynqpy.core.signing.trust_gate` instead."""
        data = data or codec.encode(msg)
        return data if self.signer is None or not sign else self.signer.seal(queue, id, data)

    def enqueue_keyed(self, queue: str, id: str, msg: Message, data: bytes | None = None,
                      check_id: bool = True) -> Call[TaskState]:
        """(new) -> pending holding ``msg.key``, or blocked behind it: the state. Raises
        TaskIdConflictError."""
        q = queue_keys(queue)
        code = _new_task_code(id, queue)
        return script_call("enqueue_keyed", lambda r: _KEYED_STATES[code(r)],
                           **_q(q, "tasks archived completed"), **exit_keys(q),
                           keylist=q.key_list(msg.key), id=id_arg(id), msg=self.seal(queue, id, msg, data),
                           check="1" if check_id else "0", key=msg.key, now=self.clock.script_now())

    def enqueue_keyed_many(self, queue: str, entries: Sequence[tuple[str, Message, bytes | None]],
                           check_ids: bool) -> Call[list[TaskState | TaskIdConflictError]]:
        """(new) x N -> pending or blocked, each as :meth:`enqueue_keyed` stores one, in one script
        call (tasks of one key keep their order). ``entries``: (id, message, its encoded payload or
        None). Returns per task its state, or the TaskIdConflictError refusing it."""
        q = queue_keys(queue)
        keylists: list[str] = []
        items: list[Any] = []
        for id, msg, data in entries:
            keylists.append(q.key_list(msg.key))
            items += [id_arg(id), self.seal(queue, id, msg, data), msg.key]

        def parse(reply: Any) -> list[TaskState | TaskIdConflictError]:
            return [_KEYED_STATES[c] if c != ID_CONFLICT else
                    TaskIdConflictError(f"a live task with id {id!r} exists in queue {queue!r}")
                    for c, (id, _, _) in zip(_batch_codes(queue, len(entries), reply), entries)]

        return script_call("enqueue_keyed_many", parse,
                           **_q(q, "tasks archived completed"), **exit_keys(q),
                           keylists=keylists, check="1" if check_ids else "0", now=self.clock.script_now(),
                           items=items)

    def key_gate(self, queue: str, id: str, key: str, read: bytes) -> Call[TaskState | None]:
        """A due keyed task takes its key (pending) or queues behind it (blocked): its state; None =
        it changed since ``read`` or is not due."""
        q = queue_keys(queue)
        return script_call("key_gate", lambda r: _KEYED_STATES.get(int(r)),
                           **_q(q, "tasks scheduled events conf"), **serial_keys(q), keylist=q.key_list(key),
                           id=id_arg(id), key=key, read=read, now=self.clock.script_now())

    def key_free(self, queue: str, key: str, holder: str) -> Call[bool]:
        """Release ``key`` if ``holder`` still holds it and has ended (the janitor's repair): True
        if it did."""
        q = queue_keys(queue)
        return script_call("key_free", lambda r: int(r) == OK, **_q(q, "tasks events conf"), **serial_keys(q),
                           keylist=q.key_list(key), key=key, holder=id_arg(holder))

    # -- durable processes (core/process.py, lua/includes/process.lua) -----------------------------

    def proc_start(self, queue: str, pid: str, id: str, msg: Message, data: bytes | None = None) -> Call[int]:
        """Create process ``pid`` (status starting) with its init input ``id``: 1 (init pending),
        2 (init blocked behind inputs of an earlier process of the id), 0 (it exists: nothing
        written)."""
        q = queue_keys(queue)
        return script_call("proc_start", _new_task_code(id, queue),
                           **_q(q, "tasks events conf archived completed proc procs"), **serial_keys(q),
                           keylist=q.key_list(msg.key), id=id_arg(id), msg=self.seal(queue, id, msg, data),
                           key=msg.key, now=self.clock.script_now(), pid=id_arg(pid),
                           record=process.new_record(msg.type[len(process.TYPE_PREFIX):], msg.tenant))

    def proc_read(self, queue: str, pid: str, first: int = 0, count: int = process.HISTORY_WINDOW) -> Call[Any]:
        """A process's record and ``count`` events from event ``first`` (0: its last ``count``):
        the raw reply (:func:`asynqpy.core.process.parse_read` reads it)."""
        q = queue_keys(queue)
        return script_call("proc_read", lambda r: r[0], **_q(q, "proc hist"), first=first, count=count,
                           items=[id_arg(pid), 0])

    def proc_read_many(self, queue: str, pids: Sequence[str], first: int = 0, count: int = process.HISTORY_WINDOW,
                       known: Sequence[int] = ()) -> Call[list[Any]]:
        """:meth:`proc_read` of several processes of one queue in one script call: the raw reply of
        each, in order. ``known``: per process, the newest event the caller holds (0 = none): the
        reply's events start there when it is within the page (see lua/proc_read.lua)."""
        q = queue_keys(queue)
        items: list[Any] = []
        for i, p in enumerate(pids):
            items += [id_arg(p), known[i] if i < len(known) else 0]
        return script_call("proc_read", list, **_q(q, "proc hist"), first=first, count=count, items=items)

    def proc_commit(self, queue: str, id: str, token: str, msg: Message, plan: process.Plan,
                    timer: tuple[str, Message] | None = None, outcome: bytes = b"") -> Call[int]:
        """Complete the process input ``id`` and write ``plan`` (see ``lua/proc_commit.lua``): a
        :meth:`proc_commit_many` of one. ``timer``: the (id, message) of the timeout input a plan
        that sets a timer schedules. ``msg``: the input's message (with its completion written in,
        when it has a retention). Raises LeaseLostError (also when the process changed since it was
        read: the input then runs again after its lease) / TaskNotFoundError."""
        return _one(self.proc_commit_many(queue, [self.commit(queue, id, token, msg, plan, timer, outcome)]))

    def commit(self, queue: str, id: str, token: str, msg: Message, plan: process.Plan,
               timer: tuple[str, Message] | None = None, outcome: bytes = b"", progressed: bool = True) -> Commit:
        """One input of a :meth:`proc_commit_many` (as :meth:`proc_commit` takes it; ``progressed``:
        whether its run wrote progress). Raises what encoding it raises (nothing is sent)."""
        q = queue_keys(queue)
        tid, tmsg = timer if timer is not None else ("", None)
        iid = id_arg(id)
        sets = tmsg is not None and plan.timer == "s" and not plan.skipped and not plan.remove  # a new timer
        tid_arg = id_arg(tid) if sets else b""
        op, rec_a, rec_due, rec_b, rec_c, events, drop_from, drop_to, cancel = process.step_args(plan, iid, tid_arg)
        args = [iid, token, self.seal(queue, id, msg) if msg.retention_ms > 0 else b"", msg.retention_ms, 0,
                outcome, msg.retried + 1, id_arg(plan.pid), plan.kind, b"" if plan.skipped else plan.expect, op,
                rec_a, rec_due, rec_b, rec_c, events, drop_from, drop_to, cancel, plan.timer_ms, tid_arg,
                self.seal(queue, tid, tmsg) if sets and tmsg is not None else b"", msg.key, 0,
                process.response_of(plan), 1 if progressed else 0]
        return Commit(id, plan.pid, args, q.inbox(msg.reply_to) if outcome and msg.reply_to else "",
                      q.key_list(msg.key) if msg.key else "")

    def proc_commit_many(self, queue: str, items: Sequence[Commit]) -> Call[list[int | Exception]]:
        """Commit a batch of process inputs of one queue (each built by :meth:`commit`) in one script
        call (the worker's batched commit, as :meth:`done_many` acknowledges tasks). The reply holds,
        per item in order, its :class:`Finished` (or 1) or the exception its write met
        (LeaseLostError, also when its process changed since it was read; TaskNotFoundError); one
        refused item does not stop the others."""
        q = queue_keys(queue)
        processed_day, _ = self._day_keys(q)
        extra: dict[str, int] = {}  # the batch's own keys, KEYS[22 + j]: key -> j
        args: list[Any] = []
        for c in items:
            a = list(c.args)
            if c.inbox:
                a[4] = extra.setdefault(c.inbox, len(extra) + 1)
            if c.keylist:
                a[23] = extra.setdefault(c.keylist, len(extra) + 1)
            args += a
        parsers = [_commit_code(c.id, c.pid) for c in items]

        def parse(reply: list[Any]) -> list[int | Exception]:
            out: list[int | Exception] = []
            for p, r in zip(parsers, reply):
                try:
                    out.append(p(r))
                except AsynqpyError as exc:
                    out.append(exc)
            return out

        return script_call("proc_commit", parse,
                           **_q(q, "tasks lease completed processed progress watch proc procs hist scheduled tick"),
                           deps=q.deps,
                           **exit_keys(q), processed_day=processed_day, extra=list(extra), day_ttl=DAY_TTL_S,
                           now=self.clock.script_now(), items=args)

    def procs(self, queue: str, start: int, stop: int) -> Call[list[tuple[str, int]]]:
        """Process ids of ``queue`` by last change, newest first, with the change's time (ms)."""
        def parse(r: list[Any]) -> list[tuple[str, int]]:
            pairs = r if r and isinstance(r[0], (list, tuple)) else list(zip(r[0::2], r[1::2]))
            return [(_s(k), int(float(v))) for k, v in pairs]

        return Call(parse, command=("ZREVRANGE", queue_keys(queue).procs, start, stop, "WITHSCORES"))

    def procs_count(self, queue: str) -> Call[int]:
        return Call(int, command=("ZCARD", queue_keys(queue).procs))

    # -- the rules engine (core/rules.py): lists named by its configuration -------------------------

    def rules_take(self, input: str, taken: str, n: int) -> Call[list[bytes]]:
        """Move up to ``n`` events from ``input`` to ``taken`` (oldest first, as stored)."""
        return script_call("rules_take", lambda r: [x if isinstance(x, bytes) else str(x).encode() for x in r],
                           input=input, taken=taken, n=n)

    def rules_push(self, queue: str, task: str | bytes, guard: str | None) -> Call[int]:
        """LPUSH ``task`` to ``queue`` unless in the sorted set ``guard`` (added there first):
        1 pushed, 0 already there."""
        return script_call("rules_push", int, queue=queue, set=guard or queue, task=task,
                           guarded="1" if guard else "0", now="")

    def rules_redrive(self, dead: str, input: str, n: int) -> Call[int]:
        """Move up to ``n`` dead events (oldest first) back to ``input``; how many moved."""
        return script_call("rules_redrive", int, dead=dead, input=input, n=n)

    def rules_dead(self, taken: str, dead: str, event: bytes, record: str) -> Call[int]:
        """Move ``event`` from ``taken`` to ``dead`` as ``record`` (1; 0 if it was not in taken)."""
        return script_call("rules_dead", int, taken=taken, dead=dead, event=event, record=record)

    def _day_keys(self, q: QueueKeys) -> tuple[str, str]:
        day = self.clock.today()
        return q.processed_on(day), q.failed_on(day)

    # -- new tasks ---------------------------------------------------------------------------

    def enqueue(
        self, queue: str, id: str, msg: Message, unique_ttl: int = 0, data: bytes | None = None, check_id: bool = True,
        mode: str = "",
    ) -> Call[int]:
        """(new) -> pending. Raises DuplicateTaskError (ThrottledError with ``mode`` 't': then
        ``unique_ttl`` is the throttle window) / TaskIdConflictError when run.
        ``data``: ``msg`` already encoded, if the caller has it; ``check_id`` False for a
        generated (random) id, which cannot collide."""
        q = queue_keys(queue)
        return script_call(
            "enqueue", _new_task_code(id, queue, mode),
            **_q(q, "tasks archived completed"), **exit_keys(q),
            lock=q.lock(msg.lock_digest(mode == "t") if unique_ttl else ""),
            id=id, msg=self.seal(queue, id, msg, data), unique=unique_ttl, check="1" if check_id else "0")

    def enqueue_many(self, queue: str, entries: Sequence[tuple[str, bytes]], check_ids: bool) -> Call[list[int]]:
        """(new) x N -> pending in one script call, for non-unique tasks of one queue. ``entries``:
        (id, encoded message). Returns the 0-based positions refused for an id conflict. A batch
        of generated ids carries a random marker, so that the call sent again writes nothing."""
        q = queue_keys(queue)
        marker = q.batch("" if check_ids else base64.urlsafe_b64encode(os.urandom(12)).decode())
        flat: list[Any] = [b""] * (2 * len(entries))
        flat[0::2] = [id for id, _ in entries]
        if self.signer is None:
            flat[1::2] = [b"p" + data for _, data in entries]
        else:
            seal = self.signer.seal
            flat[1::2] = [b"p" + seal(queue, id, data) for id, data in entries]
        return script_call("enqueue_many", lambda r: [x - 1 for x in _batch_codes(queue, len(entries), r)],
                           **_q(q, "tasks archived completed"), **exit_keys(q), marker=marker,
                           check="1" if check_ids else "0", entries=flat)

    # -- workflows (lua/includes/flow.lua; core/workflow.py) -------------------------------------

    def register_child(self, queue: str, parent: str, child_queue: str,
                       child: str) -> Call[tuple[Registered, bytes]]:
        """Tell ``parent`` (in ``queue``) that ``child`` waits on it. Returns how the parent stands,
        with its stored message when it completed (b'' else)."""
        q = queue_keys(queue)
        return script_call("register_child", lambda r: (Registered(int(r[0])), r[1] if len(r) > 1 else b""),
                           **_q(q, "tasks children"), parent=id_arg(parent), child=workflow.ref(child_queue, child))

    def enqueue_after(self, queue: str, id: str, msg: Message, policy: str, ends: Sequence[tuple[bytes, bytes]],
                      data: bytes | None = None, check_id: bool = True, delay_ms: int = 0,
                      cancelled: Message | None = None) -> Call[TaskState]:
        """(new) -> waiting, or pending when no parent is left to wait for. ``ends``: per parent its
        ref and its end as far as known (b'' = not ended); ``delay_ms``: how long after now it may
        run once released; ``cancelled`` (policy 'c'): the message stored archived, in the same
        script, when a parent has already failed. Returns the state it is in: pending, scheduled,
        waiting, or archived (a failed parent under the cancel policy); raises TaskIdConflictError."""
        q = queue_keys(queue)
        pairs: list[bytes] = []
        for r, st in ends:
            pairs += [r, st]

        def parse(reply: Any) -> TaskState:
            code = int(reply)
            if code == ID_CONFLICT:
                raise TaskIdConflictError(f"a live task with id {id!r} exists in queue {queue!r}")
            return _AFTER_STATES[code]

        return script_call(
            "enqueue_after", parse,
            **_q(q, "tasks waiting deps wake events conf archived completed scheduled tick"), **pending_keys(q),
            id=id_arg(id), msg=self.seal(queue, id, msg, data), check="1" if check_id else "0", policy=policy,
            now=self.clock.script_now(), delay=delay_arg(delay_ms),
            cancelled=self.seal(queue, id, cancelled) if cancelled is not None else "", ends=pairs)

    def resolve(self, queue: str, child: str, parent_ref: bytes, state: bytes) -> Call[Resolved]:
        """Deliver one parent's end to ``child`` (idempotent): what it did."""
        q = queue_keys(queue)
        return script_call("resolve", lambda r: Resolved(int(r)),
                           **_q(q, "tasks waiting deps wake events conf scheduled tick"), **pending_keys(q),
                           child=id_arg(child), ref=parent_ref, state=state, now=self.clock.script_now())

    def fail_waiting(self, queue: str, id: str, read: bytes, new: bytes, error: str) -> Call[int]:
        """waiting -> archived as ``new`` (the stored message rewritten with ``error``, which says
        which parent failed; sealed by :func:`~asynqpy.core.signing.trust_gate`, never here: the
        message was read from Redis), if the task still holds ``read``. Returns 1 (a
        :class:`Finished` whose ``told`` says it had children), 0 gone, :data:`CHANGED`."""
        q = queue_keys(queue)
        return script_call("fail_waiting", lambda r: Finished.with_late(r) if isinstance(r, bytes) else Acted(int(r)),
                           **_q(q, "tasks waiting archived children outbox events conf"),
                           id=id_arg(id), read=read, msg=new, now=self.clock.script_now(), error=_event_text(error))

    def outbox_read(self, queue: str, count: int = 100) -> Call[list[tuple[bytes, dict[bytes, bytes]]]]:
        """The oldest ``count`` entries of a queue's outbox (parents' ends to deliver)."""
        q = queue_keys(queue)
        return Call(lambda r: [(i, f) for i, f in r or []], command=("XRANGE", q.outbox, "-", "+", "COUNT", count))

    def outbox_delete(self, queue: str, entry_ids: Sequence[bytes]) -> Call[int]:
        """Forget delivered outbox entries."""
        q = queue_keys(queue)
        return Call(int, command=("XDEL", q.outbox, *entry_ids))

    def deps(self, queue: str, id: str) -> Call[workflow.Record | None]:
        """A task's record as a child (its parents and how each ended), or None."""
        q = queue_keys(queue)
        return script_call("flow_read", workflow.parse_record, deps=q.deps, child=id_arg(id))

    def children_of(self, queue: str, id: str) -> Call[list[tuple[str, str]]]:
        """The (queue, id) of the tasks registered as waiting on task ``id`` (until it ends)."""
        q = queue_keys(queue)
        return Call(lambda r: workflow.refs(r) if r else [], command=("HGET", q.children, id_arg(id)))

    def group_add(self, queue: str, id: str, msg: Message, unique_ttl: int = 0, data: bytes | None = None,
                  check_id: bool = True, mode: str = "") -> Call[int]:
        """(new) -> aggregating in the group ``msg.group``. Raises DuplicateTaskError /
        ThrottledError / TaskIdConflictError when run."""
        q = queue_keys(queue)
        return script_call(
            "group_add", _new_task_code(id, queue, mode),
            **_q(q, "tasks groups groups_first groups_size aggregating archived completed events conf"),
            group=q.group(msg.group), lock=q.lock(msg.lock_digest(mode == "t") if unique_ttl else ""),
            id=id, msg=self.seal(queue, id, msg, data), unique=unique_ttl, check="1" if check_id else "0",
            group_name=msg.group, now=self.clock.script_now())

    def schedule(
        self, queue: str, id: str, msg: Message, delay_ms: int, unique_ttl: int = 0, data: bytes | None = None,
        check_id: bool = True, mode: str = "",
    ) -> Call[Any]:
        """(new) -> scheduled, due ``delay_ms`` from now on the Redis clock. Returns the due time;
        with ``mode`` 'd' (debounce) ``(due, id of the scheduled task replaced or '')``; 't':
        throttled. ``check_id`` False for a generated (random) id."""
        q = queue_keys(queue)
        return script_call(
            "schedule", _new_task_code(id, queue, mode),
            **_q(q, "tasks scheduled tick archived completed events conf children outbox"),
            lock=q.lock(msg.lock_digest(mode == "t") if unique_ttl else ""),
            id=id, msg=self.seal(queue, id, msg, data), unique=unique_ttl, delay=delay_arg(delay_ms),
            now=self.clock.script_now(), check="1" if check_id else "0", mode=mode if mode == "d" else "")

    def enqueue_target(self, queue: str, id: str, msg: Message, unique_ttl: int = 0, data: bytes | None = None,
                       check_id: bool = True) -> Call[int]:
        """(new) -> targeted: a task with ``msg.workers`` and/or ``msg.runs`` (lua/includes/runs.lua).
        Raises DuplicateTaskError / TaskIdConflictError when run."""
        q = queue_keys(queue)
        index, wakes = _targets(q, msg.workers)
        return script_call(
            "enqueue_target", _new_task_code(id, queue),
            **_q(q, "tasks targeted runs wake archived completed events conf"),
            lock=q.lock(msg.lock_digest() if unique_ttl else ""), targets=[*index, *wakes],
            id=id, msg=self.seal(queue, id, msg, data), unique=unique_ttl, check="1" if check_id else "0",
            runs_needed=msg.runs, allowed=_allowed(msg.workers), now=self.clock.script_now(), k=len(index))

    def run_end(self, queue: str, task_id: str, msg: Message, outcome: str, *, run: str = "", token: str | bytes = "",
                recover: bool = False, failed: Message | None = None, max_retry: int | None = None,
                result: Any = None, sign: bool = True) -> Call[tuple[int, str]]:
        """A run of targeted task ``task_id`` ended (``outcome`` s, f, e, g: see lua/run_end.lua),
        or (``run`` '') an operator deletes (D) or archives (X) the task. ``msg``: the task's
        message (its workers name the keys, its retention decides what completing keeps);
        ``failed``: the message with the run's error (``sign`` False: stored unsigned, for a message
        that did not verify); ``result``: a succeeded run's result (kept
        per worker when the task has a retention; the task's result if this run completes it). A
        kept task (completed with retention, archived) keeps its final runs record. Returns
        (code, the task's state after)."""
        q = queue_keys(queue)
        index, wakes = _targets(q, msg.workers)
        if outcome == "e" and run and msg.workers is None:
            # a run whose lease expired frees its worker's turn: that worker (a process restarted
            # under its name) may take it again, so its own wake list is told too; the queue's token
            # alone may go to a worker that cannot take the run, and a worker of many queues
            # dequeues only a queue it holds a token for (issue 42 #9)
            wakes = [q.wake_for(run.rpartition("|")[2])]
        done = b""
        if run and msg.retention_ms > 0:  # a run's success (an operator's D/X never stores it: unverified)
            done = self.seal(queue, task_id, msg.with_(completed_at_ms=self.clock.now_ms(), result=result))
        processed_day, failed_day = self._day_keys(q)
        check = _finish_code("run_end", run or task_id)

        def parse(r: list[Any]) -> tuple[int, str]:
            code = int(r[0])
            if code < OK:
                check(code)
            return code, _s(r[1])

        return script_call(
            "run_end", parse,
            **_q(q, "tasks lease targeted runs archived completed events conf progress processed failed wake"),
            **pending_keys(q),
            processed_day=processed_day, failed_day=failed_day, lock=q.lock(msg.lock_digest()),
            kept=q.ran(task_id), targets=[*index, *wakes],
            run=id_arg(run) if run else "", token=token, outcome=outcome, task=id_arg(task_id),
            recover="1" if recover else "0", now=self.clock.script_now(), done=done, retention=msg.retention_ms,
            failed_msg=self.seal(queue, task_id, failed, sign=sign) if failed is not None else b"",
            max_retry=msg.max_retry if max_retry is None else max_retry, k=len(index), day_ttl=DAY_TTL_S,
            archived_ttl=ARCHIVED_RUNS_TTL_MS,
            result=codec.encode_payload(result, "result") if outcome == "s" and msg.retention_ms > 0 else b"")

    def set_workers(self, queue: str, id: str, read: bytes, old: Message, new: Message, stored: bytes) -> Call[Acted]:
        """A targeted task's allowed workers: ``old`` (the message read, as ``read``) -> ``new``,
        stored as ``stored`` (sealed by :func:`~asynqpy.core.signing.trust_gate`). Codes in
        lua/set_workers.lua."""
        q = queue_keys(queue)
        old_index, _ = _targets(q, old.workers)
        new_index, wakes = _targets(q, new.workers)
        before = set(old.workers or ())
        wakes = [q.wake_for(w) for w in new.workers or () if w not in before]
        return script_call("set_workers", Acted, **_q(q, "tasks runs targeted wake"),
                           targets=[*old_index, *new_index, *wakes], id=id_arg(id), read=read, msg=stored,
                           allowed=_allowed(new.workers), a=len(old_index), b=len(new_index))

    def register_queues(self, queues: Sequence[str]) -> Call[Any]:
        """Add queue names to the global queue set (plain SADD; a separate slot from the queues)."""
        return Call(lambda r: r, command=("SADD", ALL_QUEUES, *queues))

    def version_held(self, queue: str, version: int) -> Call[bool]:
        """Whether ``queue`` holds a task set aside for a version up to ``version`` (by a worker of
        an older one: core/deploy.py), which a dequeue by a worker of ``version`` takes back (a
        command the worker's ACL has: the README's "Minimal ACL")."""
        return Call(bool, command=("ZRANGEBYSCORE", queue_keys(queue).scheduled, VERSION_BAND, VERSION_BAND + version,
                                   "LIMIT", 0, 1))

    # -- the worker's transitions ------------------------------------------------------------

    def dequeue(self, queue: str, count: int, lease_ms: int, token: str, worker: str = "",
                version: int = 0, pages: int = -1) -> Call[Dequeued]:
        """pending -> active for up to ``count`` tasks, leased until now + ``lease_ms``; first,
        runs of targeted tasks ``worker`` may take ('' = none: its run ids are '<id>|<worker>').
        ``version``: the worker's (core/deploy.py encode_version, 0 = none): a task that needs a
        newer one, or whose type is blocked, is held instead (lua/includes/hold.lua). ``pages``
        >= 0: each process input taken comes with its process's record and last ``pages`` events
        (:attr:`Dequeued.procs`)."""
        q = queue_keys(queue)
        return script_call(
            "dequeue", parse_dequeued,
            **_q(q, "tasks lease paused wake events conf runs targeted_any scheduled tw proc hist"), **pending_keys(q),
            mine=q.targeted_for(worker) if worker else q.targeted_any,
            count=count, lease_ms=lease_ms, token=token, now=self.clock.script_now(), name=worker, version=version,
            pages=pages)

    def done(self, queue: str, id: str, token: str, msg: Message, outcome: bytes = b"") -> Call[int]:
        """active -> deleted (success, no retention). ``outcome``: what to push to the inbox of
        ``msg.reply_to`` (:func:`~asynqpy.core.results.pack_outcome`), b'' when nobody waits. The
        call's reply is a :class:`Finished` (1, with the late waiters to notify)."""
        return _one(self.done_many(queue, [Done(id, token, msg, outcome)]))

    def done_many(self, queue: str, items: Sequence[Done]) -> Call[list[int | Exception]]:
        """:meth:`done` for a batch of tasks of one queue, in one script call (the worker's
        batched acknowledgement). The reply holds, per item in order, its :class:`Finished` or
        the exception its write met (:class:`~asynqpy.errors.LeaseLostError`,
        :class:`~asynqpy.errors.TaskNotFoundError`); one refused item does not stop the others."""
        q = queue_keys(queue)
        processed_day, _ = self._day_keys(q)
        args, extra, plain, parse = _done_batch(q, items)
        return script_call("done", parse, **_q(q, "tasks lease processed progress watch deps"), **exit_keys(q),
                           processed_day=processed_day, extra=extra, day_ttl=DAY_TTL_S, plain=plain, items=args)

    def done_dequeue(self, queue: str, items: Sequence[Done], count: int, lease_ms: int, token: str,
                     worker: str = "", version: int = 0,
                     pages: int = -1) -> Call[tuple[list[int | Exception], Dequeued]]:
        """:meth:`done_many` of ``items``, then :meth:`dequeue` of the same queue, in one script call
        (lua/done_dequeue.lua: a busy worker's acknowledgement and its next dequeue in one round
        trip). The reply: the acknowledgement's (as :meth:`done_many`'s) and the dequeue's."""
        q = queue_keys(queue)
        processed_day, _ = self._day_keys(q)
        args, extra, plain, parse_ack = _done_batch(q, items)

        def parse(reply: list[Any]) -> tuple[list[int | Exception], Dequeued]:
            return parse_ack(reply[0]), parse_dequeued(reply[1])

        return script_call(
            "done_dequeue", parse,
            **_q(q, "tasks lease processed progress watch deps paused runs targeted_any scheduled tw proc hist"),
            **exit_keys(q), processed_day=processed_day, mine=q.targeted_for(worker) if worker else q.targeted_any,
            extra=extra, count=count, lease_ms=lease_ms, token=token, now=self.clock.script_now(), name=worker,
            version=version, pages=pages, day_ttl=DAY_TTL_S, plain=plain, items=args)

    def complete(self, queue: str, id: str, token: str, msg: Message, outcome: bytes = b"") -> Call[int]:
        """active -> completed, kept ``msg.retention_ms`` with ``msg.result``; ``outcome`` as for
        :meth:`done`."""
        q = queue_keys(queue)
        processed_day, _ = self._day_keys(q)
        return script_call(
            "complete", _finish_code("complete", id), **_q(q, "tasks lease completed processed progress watch"),
            **exit_keys(q), processed_day=processed_day, lock=q.lock(msg.lock_digest()), reply=q.inbox(msg.reply_to),
            keylist=_keylist(q, msg.key), id=id_arg(id), token=token, msg=self.seal(queue, id, msg),
            retention=msg.retention_ms, day_ttl=DAY_TTL_S, now=self.clock.script_now(), payload=outcome,
            attempt=msg.retried + 1, result=b"" if msg.result is None else codec.encode_payload(msg.result, "result"),
            key=msg.key)

    def retry(self, queue: str, id: str, token: str | bytes, msg: Message, delay_ms: float,
              recover: bool = False) -> Call[int]:
        """active -> retry, due in ``delay_ms`` (capped to 0..:data:`MAX_DELAY_MS`). ``token``: the
        lease token of the run being finished; ``recover``: the recoverer calls (the lease must
        also have expired)."""
        q = queue_keys(queue)
        processed_day, failed_day = self._day_keys(q)
        return script_call(
            "retry", _finish_code("retry", id),
            **_q(q, "tasks lease retry tick processed failed progress events conf wake"), **pending_keys(q),
            processed_day=processed_day, failed_day=failed_day, id=id_arg(id), token=token_arg(token),
            msg=self.seal(queue, id, msg), delay=delay_arg(delay_ms), day_ttl=DAY_TTL_S, now=self.clock.script_now(),
            recover="1" if recover else "0", attempt=msg.retried, error=_event_text(msg.last_error))

    def archive(
        self, queue: str, id: str, token: str | bytes, msg: Message, max_size: int, max_age_ms: int,
        sign: bool = True, recover: bool = False, outcome: bytes = b"", mark_process: bool = True,
    ) -> Call[int]:
        """active -> archived, trimming the archive to ``max_size`` tasks and ``max_age_ms``.
        A process input's process is marked error (unless ``mark_process`` is False: an input
        the process refused).
        ``sign`` False: the message is stored unsigned (a task the worker refused to trust must not
        become runnable by being archived). ``token`` and ``recover`` as for :meth:`retry`;
        ``outcome`` as for :meth:`done`."""
        q = queue_keys(queue)
        processed_day, failed_day = self._day_keys(q)
        pid, kind = process.process_of(msg) if mark_process else ("", "")
        return script_call(
            "archive", _finish_code("archive", id),
            **_q(q, "tasks lease archived processed failed trimmed progress watch proc procs"), **exit_keys(q),
            processed_day=processed_day, failed_day=failed_day, lock=q.lock(msg.lock_digest()),
            reply=q.inbox(msg.reply_to), keylist=_keylist(q, msg.key),
            id=id_arg(id), token=token_arg(token), msg=self.seal(queue, id, msg, sign=sign), max_size=max_size,
            max_age=max_age_ms, day_ttl=DAY_TTL_S, now=self.clock.script_now(), recover="1" if recover else "0",
            payload=outcome, attempt=msg.retried + 1, error=_event_text(msg.last_error), key=msg.key, pid=pid,
            kind=kind)

    def progress(self, queue: str, id: str, token: str, msg: Message, value: bytes, push: bytes = b"") -> Call[int]:
        """A running task's progress (``value``: msgpack), kept as its latest; ``push`` goes to the
        inbox of ``msg.reply_to`` (b'' = nobody waits). Raises LeaseLostError / TaskNotFoundError."""
        q = queue_keys(queue)
        return script_call("progress", _finish_code("progress", id), **_q(q, "tasks progress events conf"),
                           reply=q.inbox(msg.reply_to) if msg.reply_to else q.progress,
                           id=id_arg(id), token=token, value=value, payload=push)

    # -- waiting for outcomes ------------------------------------------------------------------

    def watch(self, queue: str, id: str, inbox: str = "") -> Call[bytes | Watched]:
        """Read whether a task finished, registering ``inbox`` as a waiter if not (see
        :mod:`asynqpy.core.results`): the stored value of a finished task, else :class:`Watched`."""
        q = queue_keys(queue)
        return script_call("watch", lambda r: r if isinstance(r, bytes) else Watched(int(r)),
                           **_q(q, "tasks watch"), id=id_arg(id), inbox=inbox)

    def reply(self, queue: str, inbox: str, outcome: bytes) -> Call[int]:
        """Push a finished task's outcome to a late waiter's inbox."""
        return script_call("reply", int, inbox=queue_keys(queue).inbox(inbox), payload=outcome)

    def rewake(self, queue: str) -> Call[int]:
        """Put back a wake token taken for ``queue`` and not acted on (1 = a token waits)."""
        q = queue_keys(queue)
        return script_call("rewake", int, **_q(q, "wake"), **pending_keys(q))

    def snooze(self, queue: str, id: str, token: str, delay_ms: float) -> Call[int]:
        """active -> scheduled in ``delay_ms`` (capped to 0..:data:`MAX_DELAY_MS`), nothing counted
        (RateLimited). Returns the due time."""
        q = queue_keys(queue)
        return script_call("snooze", _finish_code("snooze", id),
                           **_q(q, "tasks lease scheduled tick progress events conf wake"), **pending_keys(q),
                           id=id_arg(id), token=token, delay=delay_arg(delay_ms), now=self.clock.script_now())

    def requeue(self, queue: str, id: str, token: str) -> Call[int]:
        """active -> front of pending (shutdown); nothing counted."""
        q = queue_keys(queue)
        return script_call("requeue", _finish_code("requeue", id), **_q(q, "tasks lease wake progress"),
                           **pending_keys(q), id=id_arg(id), token=token)

    def extend(self, queue: str, lease_ms: int,
               held: Sequence[tuple[str, str] | tuple[str, str, str]]) -> Call[tuple[int, list[str]]]:
        """Renew leases for (id, token) pairs, or (id, token, run_of) for a run of targeted task
        ``run_of`` (only those are runs: an id holding '|' is not one by itself). Returns (now, ids
        whose lease was lost)."""
        q = queue_keys(queue)
        triples: list[Any] = []
        for id, token, *run_of in held:
            triples += [id_arg(id), token, id_arg(run_of[0]) if run_of and run_of[0] else ""]
        return script_call("extend", lambda r: (int(r[0]), [_s(x) for x in r[1:]]),
                           **_q(q, "tasks lease runs progress wake"), lease_ms=lease_ms, now=self.clock.script_now(),
                           held=triples)

    # -- background maintenance --------------------------------------------------------------

    def forward(self, queue: str, batch: int = 100) -> Call[tuple[int, int]]:
        """scheduled/retry -> pending when due. Returns (moved, ms until next due or -1), a
        :class:`Forwarded` whose ``keyed`` names the due keyed tasks left for :meth:`key_gate`."""
        q = queue_keys(queue)
        return script_call("forward", lambda r: Forwarded.of(int(r[0]), int(r[1]), [_s(x) for x in r[2:]]),
                           **_q(q, "scheduled retry tasks wake"), **pending_keys(q), batch=batch,
                           now=self.clock.script_now())

    def expired(self, queue: str, limit: int = 100) -> Call[Expired]:
        """List active tasks whose lease expired."""
        q = queue_keys(queue)

        def parse(r: list[Any]) -> Expired:
            items = [(_s(r[i]), r[i + 1] or None) for i in range(3, len(r), 2)]
            return Expired(int(r[0]), int(r[1]), items, int(r[2]))

        return script_call("expired", parse, **_q(q, "lease tasks outbox"), limit=limit, now=self.clock.script_now())

    def drop(self, queue: str, id: str) -> Call[Acted]:
        """Remove an expired lease whose task data is gone: OK (done), NOT_FOUND, LEASE_ALIVE."""
        q = queue_keys(queue)
        return script_call("drop", Acted, **_q(q, "lease tasks wake"), **pending_keys(q), id=id_arg(id),
                           now=self.clock.script_now())

    def reconcile(self, queue: str, cursor: str, count: int = 200) -> Call[tuple[str, list[tuple[str, str]]]]:
        """One step of the consistency sweep: puts tasks back into the container their state
        names. Returns (next cursor, '0' = sweep done; [(id, what was repaired)])."""
        q = queue_keys(queue)

        def parse(r: list[Any]) -> tuple[str, list[tuple[str, str]]]:
            return _s(r[0]), [(_s(r[i]), _s(r[i + 1])) for i in range(1, len(r), 2)]

        return script_call("reconcile", parse,
                           **_q(q, "tasks lease scheduled retry archived completed targeted waiting blocked ta"),
                           cursor=cursor, count=count, now=self.clock.script_now())

    def tenant_fix(self, queue: str, mode: str, cursor: str,
                   count: int = 200) -> Call[tuple[str, list[tuple[str, str]]]]:
        """One step of a tenant part of the consistency sweep (lua/tenant_fix.lua): ``mode``
        "active" frees the slots counted for tasks no longer active; "ring" puts tenants with
        pending tasks that no dequeue would pick back in the ready ring (and corrects the count of
        one held at its concurrency). Returns (next cursor, '0' = pass done; [(id or tenant, what
        was repaired)])."""
        q = queue_keys(queue)

        def parse(r: list[Any]) -> tuple[str, list[tuple[str, str]]]:
            return _s(r[0]), [(_s(r[i]), _s(r[i + 1])) for i in range(1, len(r), 2)]

        return script_call("tenant_fix", parse, tasks=q.tasks, **pending_keys(q), wake=q.wake, lease=q.lease, tw=q.tw,
                           mode=mode, cursor=cursor, count=count)

    def sweep_claim(self, queue: str, owner: str, lease_ms: int, interval_ms: int,
                    parts: Sequence[str]) -> Call[SweepLease]:
        """Ask for the lease of the queue's consistency sweep (lua/sweep.lua): granted when a
        sweep is due (one ``interval_ms`` after the last ended; a queue never swept is recorded
        now, its first sweep due an interval later) or under way with no live holder. The reply's
        ``cursors`` (granted) say where to go on: the parts not done yet, each at its cursor."""
        return script_call("sweep", SweepLease.of, sweep=queue_keys(queue).sweep, owner=owner, lease=lease_ms,
                           interval=interval_ms, now=self.clock.script_now(), mode="claim", parts=list(parts))

    def sweep_save(self, queue: str, owner: str, lease_ms: int, interval_ms: int,
                   cursors: Mapping[str, str]) -> Call[SweepLease]:
        """Record a step of the queue's consistency sweep: the parts left, each at its next
        cursor (none left: the sweep ended), and renew the lease; refused (code 0) when the lease
        is another's now."""
        flat = [x for kv in cursors.items() for x in kv]
        return script_call("sweep", SweepLease.of, sweep=queue_keys(queue).sweep, owner=owner, lease=lease_ms,
                           interval=interval_ms, now=self.clock.script_now(), mode="save", parts=flat)

    def unwatch_gone(self, queue: str, cursor: str, count: int = 200) -> Call[tuple[str, int]]:
        """One step of the sweep of the watch hash: forgets the waiters of tasks that are gone.
        Returns (next cursor, '0' = pass done; entries removed)."""
        return self.forget_gone(queue, "watch", cursor, count)

    def forget_gone(self, queue: str, kind: str, cursor: str, count: int = 200) -> Call[tuple[str, int]]:
        """One step of the sweep of a per-task hash (``kind``: "watch", "children" or "deps"):
        forgets the entries of tasks that are gone. Returns (next cursor, '0' = pass done;
        entries removed)."""
        q = queue_keys(queue)
        key = {"watch": q.watch, "children": q.children, "deps": q.deps}[kind]
        return script_call("forget_gone", lambda r: (_s(r[0]), int(r[1])), tasks=q.tasks, hash=key,
                           cursor=cursor, count=count, mode=kind, now=self.clock.script_now())

    def expire(self, queue: str, batch: int = 100) -> Call[tuple[int, int]]:
        """completed -> deleted past retention. Returns (deleted, ms until next or -1)."""
        q = queue_keys(queue)
        return script_call("expire", lambda r: (int(r[0]), int(r[1])), **_q(q, "completed tasks"), batch=batch,
                           now=self.clock.script_now())

    def trim(self, queue: str, max_size: int, max_age_ms: int) -> Call[int]:
        """archived -> deleted beyond the size/age limits (data included). Returns how many (at most
        :data:`TRIM_PER_CALL`: that many means more may be left)."""
        q = queue_keys(queue)
        return script_call("trim", int, **_q(q, "archived tasks trimmed"), max_size=max_size, max_age=max_age_ms,
                           now=self.clock.script_now())

    # -- queue control and reads -------------------------------------------------------------

    def pause(self, queue: str) -> Call[bool]:
        q = queue_keys(queue)
        return script_call("pause", lambda r: bool(int(r)), paused=q.paused, now=self.clock.script_now())

    def unpause(self, queue: str) -> Call[bool]:
        q = queue_keys(queue)
        return script_call("unpause", lambda r: bool(int(r)), **_q(q, "paused wake"), **pending_keys(q))

    def stats(self, queue: str) -> Call[QueueStats]:
        """Counts per state and counters of a queue (one atomic read)."""
        return self._stats_call([queue], lambda r: _queue_stats(queue, r))

    def snapshot(self, queue: str) -> Call[Snapshot]:
        """:meth:`stats` plus the trimmed counter, Redis's time and the oldest pending task."""
        return self._stats_call([queue], lambda r: _snapshot(queue, r))

    def snapshots(self, queues: Sequence[str], samples: int = 0) -> Call[list[tuple[Snapshot, int | None]]]:
        """:meth:`snapshot` of each of ``queues`` (at least one; one script call: on a Cluster they
        must share a slot) with, for ``samples`` > 0, its memory (MEMORY USAGE ... SAMPLES
        ``samples`` of its tasks hash, pending list and state zsets; None when not asked or when
        Redis refuses MEMORY)."""
        names = list(queues)

        def parse(r: list[Any]) -> list[tuple[Snapshot, int | None]]:
            out = []
            for i, name in enumerate(names):
                row = r[i * STATS_WIDTH:(i + 1) * STATS_WIDTH]
                out.append((_snapshot(name, row), None if row[19] is None else int(row[19])))
            return out

        return self._stats_call(names, parse, samples)

    def _stats_call(self, queues: Sequence[str], parse: Callable[[Any], T], samples: int = 0) -> Call[T]:
        q = queue_keys(queues[0])
        processed_day, failed_day = self._day_keys(q)
        day = self.clock.today()
        more = [k for name in queues[1:] for k in _stats_keys(queue_keys(name), day)]
        return script_call(
            "stats", parse, **pending_keys(q),
            **_q(q, "lease scheduled retry archived completed paused processed failed tasks trimmed aggregating groups "
                    "targeted waiting blocked conf"),
            processed_day=processed_day, failed_day=failed_day, more=more, now=self.clock.script_now(),
            samples=samples)

    def page(self, queue: str, state: TaskState, start: int, stop: int,
             values: bool = True, group: str = "") -> Call[list[tuple[str, float | None, bytes | None]]]:
        """Ranks ``start``..``stop`` of the tasks in ``state`` (pending: oldest first; scheduled,
        retry, active: soonest score first; archived, completed: newest first; aggregating, of
        ``group``: oldest first), each with its stored value: [(id, score or None, value or None)]."""
        q = queue_keys(queue)
        kind = "list" if state is TaskState.PENDING else "zset"
        order = "desc" if state in (TaskState.ARCHIVED, TaskState.COMPLETED) else "asc"

        def parse(r: list[Any]) -> list[tuple[str, float | None, bytes | None]]:
            return [(_s(r[i]), float(r[i + 1]) if r[i + 1] else None, r[i + 2] or None) for i in range(0, len(r), 3)]

        return script_call("page", parse, container=container_of(q, state, group), **_q(q, "tasks prio tq tr tn"),
                           kind=kind, order=order, start=start, stop=stop, values="1" if values else "0")

    def queues(self) -> Call[list[str]]:
        """Every known queue's name, sorted: the one read of :data:`ALL_QUEUES` (invalid members are
        skipped and logged, :func:`~asynqpy.core.keys.known_queues`)."""
        return Call(known_queues, command=("SMEMBERS", ALL_QUEUES))

    def get_task(self, queue: str, id: str) -> Call[bytes | None]:
        """The stored value of a task (state char [+ token] + message), or None."""
        q = queue_keys(queue)
        return Call(lambda r: r, command=("HGET", q.tasks, id_arg(id)))

    # -- periodic tasks (scheduler entries; see asynqpy.core.cron) -----------------------------

    def cron_fire(self, queue: str, name: str, definition: bytes, tick_ms: int, id: str, msg: Message,
                  keep: int) -> Call[tuple[int, int]]:
        """Enqueue the task of entry ``name`` for ``tick_ms`` (0 = run now), exactly once across
        schedulers. Returns (code, Redis now in ms); codes in lua/cron_fire.lua."""
        q = queue_keys(queue)
        return script_call(
            "cron_fire", lambda r: (int(r[0]), int(r[1])),
            **_q(q, "cron cron_last cron_paused tasks wake events conf"), **pending_keys(q),
            history=q.cron_history(name), name=name, definition=definition, tick=tick_ms, id=id,
            msg=self.seal(queue, id, msg), now=self.clock.script_now(), keep=keep)

    def cron_remove(self, queue: str, name: str) -> Call[int]:
        """Forget entry ``name``: its definition, last tick, pause and history. 1 = removed, 0 = none."""
        q = queue_keys(queue)
        return script_call("cron_remove", int, **_q(q, "cron cron_last cron_paused"), history=q.cron_history(name),
                           name=name)

    def cron_pause(self, queue: str, name: str, paused: bool) -> Call[int]:
        """Pause or resume entry ``name`` (ticks that fall in a pause never fire). 1 = done, 0 = no
        such entry."""
        q = queue_keys(queue)
        return script_call("cron_pause", int, **_q(q, "cron cron_paused cron_last"), name=name,
                           pause="1" if paused else "0", now=self.clock.script_now())

    # -- operator actions (the Inspector) ----------------------------------------------------

    def delete_tasks(self, queue: str, state: TaskState, items: Sequence[tuple[str, str, int, bytes]],
                     window: int) -> Call[list[Acted]]:
        """Delete tasks still in ``state`` (not active) and unchanged since read. ``items``: (id, lock
        digest or '', index hint or -1 / -2, the stored value read; see delete_tasks.lua).
        Returns a code per task (1 = deleted, :data:`CHANGED` = read it again)."""
        q = queue_keys(queue)
        locks, args = self._per_task(q, items)
        return script_call("delete_tasks", _acted, **_q(q, "tasks deps"), **exit_keys(q),
                           container=container_of(q, state), locks=locks, state=state.code, window=window, items=args)

    def archive_tasks(self, queue: str, state: TaskState, items: Sequence[tuple[str, str, int, bytes]],
                      window: int) -> Call[list[Acted]]:
        """pending/scheduled/retry -> archived; ``items`` as for :meth:`delete_tasks`."""
        q = queue_keys(queue)
        locks, args = self._per_task(q, items)
        return script_call("archive_tasks", _acted, **_q(q, "tasks archived"), **exit_keys(q),
                           container=container_of(q, state), locks=locks, state=state.code, window=window,
                           now=self.clock.script_now(), items=args)

    @staticmethod
    def _per_task(q: QueueKeys, items: Sequence[tuple[str, str, int, bytes]]) -> tuple[list[str], list[Any]]:
        """An operator batch's per-task keys (lock, key's list) and arguments (id, hint, read, key)."""
        keys: list[str] = []
        args: list[Any] = []
        for id, digest, hint, read in items:
            key = key_of(read)  # a holder's key goes to its next task (lua/includes/exit.lua)
            keys += [q.lock(digest), _keylist(q, key)]
            args += [id_arg(id), hint, read, key]
        return keys, args

    def edit_task(self, queue: str, state: TaskState, id: str, read: bytes, new: bytes, at_ms: int | None,
                  in_ms: int | None, window: int, hint: int, keyed: bool = False) -> Call[Acted]:
        """pending/scheduled/retry -> the same task with the message ``new`` (sealed by
        :func:`~asynqpy.core.signing.trust_gate`, never here: it rewrites a message read from Redis)
        and, if ``at_ms`` or ``in_ms`` is given, a new due time. ``read``: the stored value the caller
        read (the task must still hold it). ``keyed``: a scheduled task due now stays scheduled (due
        now by the Redis clock) for the forwarder's key gate. Codes in lua/edit_task.lua."""
        q = queue_keys(queue)
        return script_call("edit_task", Acted, **_q(q, "tasks scheduled wake tick events conf"), **pending_keys(q),
                           container=container_of(q, state), id=id_arg(id), state=state.code, read=read, msg=new,
                           at_ms="" if at_ms is None else at_ms, in_ms="" if in_ms is None else in_ms, window=window,
                           hint=hint, now=self.clock.script_now(), keyed="1" if keyed else "0")

    def aggregate(self, queue: str, group: str, members: Sequence[tuple[str, bytes]], id: str,
                  msg: Message) -> Call[Acted]:
        """A group's ``members`` ((id, stored value read), oldest first) -> deleted, and the
        aggregate ``msg`` -> pending under ``id``, in one step, only if every member is still in
        the group unchanged. Codes in lua/aggregate.lua."""
        q = queue_keys(queue)
        locks: list[str] = []  # KEYS[10 + j]
        triples: list[Any] = []
        for mid, read in members:
            digest = lock_digest(read)
            if digest:
                locks.append(q.lock(digest))
            triples += [id_arg(mid), read, len(locks) if digest else 0]
        return script_call("aggregate", Acted,
                           **_q(q, "tasks groups groups_first groups_size aggregating pending wake events conf"),
                           group=q.group(group), locks=locks, name=group, id=id, msg=self.seal(queue, id, msg),
                           members=triples)

    def ungroup(self, queue: str, id: str, read: bytes, verb: str, group: str) -> Call[Acted]:
        """aggregating -> deleted (``verb`` 'delete'), archived ('archive') or pending ('run'), if
        the task still holds the value ``read``. Codes in lua/ungroup.lua."""
        q = queue_keys(queue)
        target = {"archive": q.archived, "run": q.pending}.get(verb, q.group(group))
        return script_call("ungroup", Acted,
                           **_q(q, "tasks groups groups_first groups_size aggregating wake events conf"),
                           group=q.group(group), target=target, lock=q.lock(lock_digest(read)),
                           id=id_arg(id), read=read, verb=verb, name=group, now=self.clock.script_now())

    def run_tasks(self, queue: str, state: TaskState, ids: Sequence[str]) -> Call[list[Acted]]:
        """scheduled/retry/archived -> pending now. Returns a code per task (1 = moved)."""
        q = queue_keys(queue)
        return script_call("run_tasks", _acted, **_q(q, "tasks wake events conf"), **pending_keys(q),
                           container=container_of(q, state), state=state.code, ids=[id_arg(id) for id in ids])

    def cancel(self, queue: str, id: str, token: str, msg: bytes, digest: str, notice: bytes,
               original: Message | None = None) -> Call[Acted]:
        """active -> archived (``msg``: the rewritten encoded message) if still leased with
        ``token``, and ``notice`` published on the cancel channel. ``original``: the task's
        message as read (None: malformed), whose key and process the exit bookkeeping needs
        (lua/includes/exit.lua: children told, key released, process marked error)."""
        q = queue_keys(queue)
        key = original.key if original is not None else ""
        pid, kind = process.process_of(original) if original is not None else ("", "")
        return script_call("cancel", lambda r: Acted.OK if r == b"!" else Acted(int(r)),
                           **_q(q, "tasks lease archived progress proc procs"), **exit_keys(q), lock=q.lock(digest),
                           keylist=_keylist(q, key), id=id_arg(id), token=id_arg(token), msg=msg,
                           now=self.clock.script_now(), channel=CANCEL_CHANNEL, notice=notice, key=key, pid=pid,
                           kind=kind)

    def drop_queue(self, queue: str, force: bool = False) -> Call[Acted]:
        """Delete an empty queue's keys (1), or refuse (-7) if a task is left (or, unless
        ``force``, a durable process)."""
        q = queue_keys(queue)
        return script_call("drop_queue", Acted, **_q(
            q, "lease scheduled retry archived completed tasks paused wake tick processed failed trimmed watch "
               "progress events conf aggregating groups groups_first groups_size targeted runs targeted_any "
               "waiting deps children outbox blocked keyheld proc procs hist tw"), **pending_keys(q),
            force="1" if force else "0")

    def pending_ids(self, queue: str, start: int, stop: int) -> Call[list[str]]:
        """LRANGE of the pending list (from its left end: newest first)."""
        return Call(lambda r: [_s(x) for x in r], command=("LRANGE", queue_keys(queue).pending, start, stop))

    def tenant_band(self, queue: str, tenant: str, priority: int, start: int, count: int) -> Call[list[bytes]]:
        """Members ``start``.. (``count`` of them) of one tenant's tasks of one priority in the
        queue's tenant zset (lua/includes/priority.lua: ``tenant \\0 band seq id``, oldest first)."""
        t = tenant.encode()
        return Call(list, command=("ZRANGE", queue_keys(queue).tq, b"[" + t + b"\0" + bytes([57 - priority]),
                                   b"(" + t + b"\0" + bytes([58 - priority]), "BYLEX", "LIMIT", start, count))


def _one(batch: Call[list[Any]]) -> Call[Any]:
    """A batch call of one item as the call of that item: its reply, or its error raised."""

    def parse(reply: Any) -> Any:
        res = batch.parse(reply)[0]
        if isinstance(res, Exception):
            raise res
        return res

    return Call(parse, batch.script, batch.keys, batch.args)
