"""The Redis key schema: the only module that formats key names.

Every key of a queue carries the hash tag ``{queue}``, so one queue lives in one Redis Cluster slot
and every script, which only touches one queue, can be run on a cluster.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable
from datetime import date

from ..model.errors import InvalidArgumentError

PREFIX = "asynqpy"
ALL_QUEUES = f"{PREFIX}:queues"
"""SET of every queue name ever written to (clients and servers register their queues)."""
SERVERS = f"{PREFIX}:servers"
"""ZSET server id -> expiry (ms) of its heartbeat; readers skip expired members."""
PROTOCOL = f"{PREFIX}:protocol"
"""STRING: the store's wire protocol version (an integer; absent = 1), read once per client and
per worker start (core/spine/protocol.py); in its own cluster slot, so never named by a script."""
UPGRADE = f"{PREFIX}:upgrade"
"""HASH: the cursor of the migration ``asynqpy upgrade`` is running (``step``: its name, ``cursor``:
where its next batch starts, ``seen`` / ``changed``: its counts so far); absent when none is under
way. A rerun after a kill resumes there (core/spine/migrations.py); plain commands only."""
CRON_QUEUES = f"{PREFIX}:cron:queues"
"""SET of the queues that have (or had) scheduler entries: where schedulers look for them."""
CANCEL_CHANNEL = f"{PREFIX}:cancel"
"""Pub/sub channel (not a key) on which the cancel script announces a cancelled active task."""
CONTROL_PREFIX = f"{PREFIX}-control"
"""Remote control's own key space (and channel), outside ``asynqpy:*``: a Redis ACL key pattern
``~asynqpy:*`` (the producer's, the inspector's) does not reach it; only the roles that control
servers or obey them are granted ``~asynqpy-control:*`` (docs/security.md, "Minimal ACL")."""
CONTROL_CHANNEL = CONTROL_PREFIX
"""Pub/sub channel on which an operator's command names the server it is for (its id): the server
then reads its control list (:func:`control_list`)."""


def control_list(server_id: str) -> str:
    """LIST of the commands (stop, quiet, resume) waiting for a server; expires a minute after the
    last one (a command to a server that died meanwhile does not linger)."""
    return f"{CONTROL_PREFIX}:{server_id}"


def control_ack(command_id: str) -> str:
    """LIST where a server acknowledges a command (the operator BLPOPs it); expires in a minute."""
    return f"{CONTROL_PREFIX}:ack:{command_id}"

_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Unicode category Cc (C0 and C1 controls, DEL) and the line and paragraph separators: what a name
must not hold, since it would end or forge a log line (or a line of the CLI's output)."""


def validate_name(kind: str, value: object, max_len: int) -> str:
    """Return ``value`` if it is a valid caller-chosen name, else raise :class:`InvalidArgumentError`
    naming ``kind`` ("task type", "task_id", "key", ...).

    The one check every name a caller chooses goes through (task types, task ids, ``key=``,
    unique keys, groups, scheduler entry names; queue and worker names are narrower still): a
    non-empty ``str`` of at most ``max_len`` characters of text that UTF-8 can encode, without a
    control character (Unicode category Cc: NUL, newline, escape...) or a line/paragraph separator
    (U+2028, U+2029): those would let a name end or forge a log line.
    """
    if not isinstance(value, str) or not value or len(value) > max_len:
        shown = repr(value)
        raise InvalidArgumentError(f"{kind} must be a non-empty string of at most {max_len} characters, got "
                                   f"{shown[:100]}{'...' if len(shown) > 100 else ''}")
    bad = _CONTROL_RE.search(value)
    if bad is not None:
        raise InvalidArgumentError(f"{kind} {value[:100]!r} holds a control character (U+{ord(bad.group()):04X} at "
                                   f"position {bad.start()}): names are printable text on one line")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{kind} {value[:100]!r} is not valid (UTF-8 encodable) text") from None
    return value


DOT_SEGMENTS = (".", "..")
"""Names that a URL's path cannot carry as a segment: browsers resolve them (and their ``%2e``
forms) before sending, so a console URL naming one acts on what is above it."""


def refuse_dot_segment(kind: str, value: str) -> str:
    """``value``, unless it is ``.`` or ``..`` (:data:`DOT_SEGMENTS`): InvalidArgumentError. Checked
    where such names are made (a task's tenant, a scheduler entry), so that the web console's URLs
    (one path segment per name, fully encoded) always name what they say."""
    if value in DOT_SEGMENTS:
        raise InvalidArgumentError(f"{kind} {value!r} is refused: '.' and '..' are path segments a browser "
                                   "resolves (a console URL naming it would act on something else)")
    return value


_QUEUE_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
_GROUP_RE = re.compile(r"^[^\s{}]{1,200}$")
_LIMIT_RE = _QUEUE_RE


def validate_group(name: object) -> str:
    """Return ``name`` if it is a valid aggregation group name (1-200 characters, no spaces or
    braces, and what :func:`validate_name` asks), else raise :class:`InvalidArgumentError`."""
    if isinstance(name, str) and name:
        validate_name("group", name, 200)
    if not isinstance(name, str) or not _GROUP_RE.match(name):
        raise InvalidArgumentError(f"invalid group name {name!r}: use 1-200 characters, no spaces or braces")
    return name


_WORKER_RE = re.compile(r"^[A-Za-z0-9_.:@/+\-]{1,128}$")


def validate_worker_name(name: object) -> str:
    """Return ``name`` if it is a valid worker name (1-128 characters among letters, digits and
    ``_ . : @ / + -``: no spaces, commas, '=' or '|', which the runs record and run ids use),
    else raise :class:`InvalidArgumentError`."""
    if not isinstance(name, str) or not _WORKER_RE.match(name):
        raise InvalidArgumentError(f"invalid worker name {name!r}: use 1-128 letters, digits or _ . : @ / + -")
    return name


_valid: set[str] = set()


def validate_queue(name: object) -> str:
    """Return ``name`` if it is a valid queue name, else raise :class:`InvalidArgumentError`.

    A queue name is 1-128 characters from ``A-Z a-z 0-9 _ . : -`` (no braces: they would break the
    hash tag that keeps a queue in one cluster slot).
    """
    if isinstance(name, str) and name in _valid:
        return name
    if not isinstance(name, str) or not _QUEUE_RE.match(name):
        raise InvalidArgumentError(
            f"invalid queue name {name!r}: use 1-128 characters from A-Z a-z 0-9 _ . : -"
        )
    if len(_valid) < 10_000:
        _valid.add(name)
    return name


_PATTERN_RE = re.compile(r"^[A-Za-z0-9_.:*?-]{1,128}$")


def is_queue_pattern(name: str) -> bool:
    """Whether a served queue name is a pattern (``*``: any characters, ``?``: one character),
    which a server matches against every queue, present and future (docs/workers.md)."""
    return "*" in name or "?" in name


def validate_queue_or_pattern(name: object) -> str:
    """Return ``name`` if it is a valid queue name, or a pattern of them (``tenant-*``), else
    raise :class:`InvalidArgumentError`."""
    if isinstance(name, str) and is_queue_pattern(name):
        if not _PATTERN_RE.match(name):
            raise InvalidArgumentError(
                f"invalid queue pattern {name!r}: use 1-128 characters from A-Z a-z 0-9 _ . : - and the "
                "wildcards * (any characters) and ? (one character)")
        return name
    return validate_queue(name)


def similar_queue(name: str, known: Iterable[str]) -> str | None:
    """The queue of ``known`` whose name is closest to ``name`` (a typo's likely meaning), or None
    if none is close or ``name`` is among them."""
    names = sorted(set(known))
    if name in names:
        return None
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return close[0] if close else None
_skipped: set[bytes | str] = set()
_log = logging.getLogger("asynqpy.inspector")


def known_queues(members: Iterable[bytes | str]) -> list[str]:
    """The valid queue names among ``members`` (of :data:`ALL_QUEUES`), sorted. A member that is
    not one (an SADD by hand, or by a role allowed to write that set) is skipped, with one WARNING
    per name and process: a single bad member must not blind every all-queues view."""
    out = []
    for m in members:
        name: bytes | str = m
        try:
            name = m.decode() if isinstance(m, bytes) else m
            out.append(validate_queue(name))
        except (UnicodeDecodeError, InvalidArgumentError):
            if name not in _skipped:
                if len(_skipped) < 10_000:
                    _skipped.add(name)
                _log.warning("skipping %r in %s: not a valid queue name (remove it with SREM)", name, ALL_QUEUES)
    return sorted(out)


def limit_keys(name: str) -> tuple[str, str]:
    """The token bucket (HASH) and holders (ZSET) of a named limit (:class:`asynqpy.Limiter`),
    tagged by the name: one slot per limit."""
    if not isinstance(name, str) or not _LIMIT_RE.match(name):
        raise InvalidArgumentError(f"invalid limit name {name!r}: use 1-128 characters from A-Z a-z 0-9 _ . : -")
    return f"{PREFIX}:limit:{{{name}}}", f"{PREFIX}:limit:{{{name}}}:held"


def wait_stop(tag: str) -> str:
    """LIST a processor's idle wait blocks on besides its queues' wake lists (when it cannot be
    ended with ``CLIENT UNBLOCK``): a push to it ends the wait, so a fetcher is stopped without
    cancelling a BLPOP in flight (whose reply, a wake token it popped, would be lost)."""
    return f"{PREFIX}:waitstop:{tag}"


def server_info(server_id: str) -> str:
    """STRING holding a live server's description (msgpack), with a TTL refreshed by heartbeats."""
    return f"{PREFIX}:server:{server_id}"


class QueueKeys:
    """The keys of one queue (computed once). See docs/internals-tasks.md for what each holds:

    tasks (HASH id -> state char [+ lease token] + message), pending (LIST), lease (ZSET of active
    ids -> lease expiry), scheduled, retry, archived, completed (ZSETs), paused (STRING), wake
    (LIST idle workers BLPOP on), tick (LIST forwarders BLPOP on), processed and failed
    (lifetime counters), trimmed (lifetime count of archived tasks deleted by the archive limits),
    placeholder (the never-set lock key non-unique tasks pass), watch (HASH id -> inbox ids of
    waiters that started waiting after the enqueue), pwatch (HASH process id -> inbox ids of clients
    waiting for a durable run to end, lua/proc_watch.lua), progress (HASH id -> latest progress value),
    events (STREAM, the lifecycle events), conf (HASH of per-queue settings: ``events`` = the
    stream's cap, 0 = off), cron (HASH scheduler entry name -> definition), cron_last (HASH entry
    name -> last fired tick, ms), cron_paused (SET of paused entry names), groups / groups_first /
    groups_size (ZSETs group name -> its newest task's join time / oldest's / its size), aggregating
    (counter of the tasks in groups), prio (ZSET of pending ids of a priority other than the
    default, see lua/includes/priority.lua), targeted (ZSET of targeted tasks: ``workers=`` or
    ``runs=``), runs (HASH targeted task id -> its runs record), targeted_any (ZSET index of the
    targeted tasks any worker may run; see lua/includes/runs.lua); the workflow keys
    (lua/includes/flow.lua): waiting (ZSET of tasks waiting on parents -> since when), deps (HASH
    child id -> its record: parents, how each ended, results), children (HASH parent id -> the refs
    of the tasks waiting on it), outbox (STREAM of parents' ends not yet delivered to children);
    keyed serial execution (lua/includes/serial.lua): blocked (ZSET of tasks waiting behind their
    key), keyheld (HASH key -> the id holding it), and per key its list (:meth:`key_list`);
    durable processes (lua/includes/process.lua): proc (HASH process id -> record), procs (ZSET
    process id -> last change), hist (HASH '<process id>:<n>' -> event); sweep (HASH: the lease and
    cursors of the janitor's consistency sweep, shared by the queue's workers, lua/sweep.lua);
    tenants (``enqueue(..., tenant=)``, lua/includes/priority.lua): tq (ZSET, scores 0, of the
    pending tasks with a tenant, member 'tenant \\0 band seq id'), tr (ZSET, the ready ring: tenant
    -> pass), tn (HASH: 'v' the virtual time, 'q' the seq counter, 'l:<tenant>' its settings), ta
    (ZSET, scores 0, of the active tasks of tenants, member 'tenant \\0 id'). Every script that
    names prio names these four (``core.spine.broker.pending_keys``); tw (ZSET: the tenants held by their
    rate -> the ms their next task conforms; named only by the dequeue, set_tenant and tenant_fix);
    tkeys (HASH tenant -> its data key, sealed with the key ring: encryption's per-tenant keys,
    core/security/keyplans.py; no script names it); blobs (SET of the blob names of offloaded
    payloads whose tasks left for good, deleted from the blob store by a worker:
    lua/includes/offload.lua, docs/offload.md).
    """

    __slots__ = ("name", "base", "tasks", "pending", "lease", "scheduled", "retry", "archived", "completed",
                 "paused", "wake", "tick", "processed", "failed", "trimmed", "placeholder", "watch", "pwatch",
                 "progress", "events", "conf", "cron", "cron_last", "cron_paused", "groups", "groups_first",
                 "groups_size", "aggregating", "prio", "targeted", "runs", "targeted_any", "waiting", "deps",
                 "children", "outbox", "blocked", "keyheld", "proc", "procs", "hist", "sweep", "tq", "tr", "tn", "ta",
                 "tw", "tkeys", "blobs")

    def __init__(self, name: str) -> None:
        self.name = name
        self.base = base = f"{PREFIX}:{{{name}}}:"
        self.tasks = base + "t"
        self.pending = base + "pending"
        self.lease = base + "lease"
        self.scheduled = base + "scheduled"
        self.retry = base + "retry"
        self.archived = base + "archived"
        self.completed = base + "completed"
        self.paused = base + "paused"
        self.wake = base + "wake"
        self.tick = base + "tick"
        self.processed = base + "processed"
        self.failed = base + "failed"
        self.trimmed = base + "trimmed"
        self.placeholder = base + "u:"
        self.watch = base + "watch"
        self.pwatch = base + "pwatch"
        self.progress = base + "progress"
        self.events = base + "events"
        self.conf = base + "conf"
        self.cron = base + "cron"
        self.cron_last = base + "cron:last"
        self.cron_paused = base + "cron:paused"
        self.groups = base + "groups"
        self.groups_first = base + "groups:first"
        self.groups_size = base + "groups:size"
        self.aggregating = base + "aggregating"
        self.prio = base + "prio"
        self.targeted = base + "targeted"
        self.runs = base + "runs"
        self.targeted_any = base + "m:*"
        self.waiting = base + "waiting"
        self.deps = base + "deps"
        self.children = base + "children"
        self.outbox = base + "outbox"
        self.blocked = base + "blocked"
        self.keyheld = base + "keyheld"
        self.proc = base + "proc"
        self.procs = base + "procs"
        self.hist = base + "hist"
        self.sweep = base + "sweep"
        self.tq = base + "tq"
        self.tr = base + "tr"
        self.tn = base + "tn"
        self.ta = base + "ta"
        self.tw = base + "tw"
        self.tkeys = base + "tkeys"
        self.blobs = base + "blobs"

    def key_list(self, key: str) -> str:
        """LIST of the ids waiting behind ``key`` (keyed serial execution, lua/includes/serial.lua)."""
        return f"{self.base}key:{key}"

    def durable_cancel(self, run_id: str) -> str:
        """STRING: the latest durable cancel notice of run ``run_id`` (core/durable/cancelling.py),
        kept a minute: a server that subscribed to the cancel channel after it was published reads
        it then (worker/canceller.py). Plain commands only."""
        return f"{self.base}dcancel:{run_id}"

    def targeted_for(self, worker: str) -> str:
        """ZSET index of the targeted tasks that name ``worker`` (id -> when enqueued)."""
        return f"{self.base}m:w:{worker}"

    def ran(self, id: str) -> str:
        """HASH: what is kept of targeted task ``id``'s runs: 'r:<worker>' -> that worker's run
        result (tasks with retention), and '' -> the final record once it completed with
        retention (kept as long) or was archived (lua/run_end.lua). An id that is not text (read
        back from bytes that are not UTF-8) is named by its hex bytes: 'ran~<hex>'."""
        try:
            id.encode()
        except UnicodeEncodeError:
            return f"{self.base}ran~{id.encode(errors='surrogateescape').hex()}"
        return f"{self.base}ran:{id}"

    def wake_for(self, worker: str) -> str:
        """LIST: the wake-up token of ``worker`` alone (a targeted task naming it arrived)."""
        return f"{self.base}wake:w:{worker}"

    def group(self, name: str) -> str:
        """ZSET of an aggregation group's tasks: id -> when it joined (ms, Redis clock)."""
        return f"{self.base}g:{name}"

    def cron_history(self, entry: str) -> str:
        """LIST of an entry's last enqueues, newest first ('tick_ms task_id enqueued_ms')."""
        return f"{self.base}cron:h:{entry}"

    def processed_on(self, day: date) -> str:
        """STRING: the count of tasks processed on ``day`` (UTC; expires after a while)."""
        return f"{self.base}processed:{day.isoformat()}"

    def failed_on(self, day: date) -> str:
        """STRING: the count of tasks failed on ``day`` (UTC; expires after a while)."""
        return f"{self.base}failed:{day.isoformat()}"

    def batch(self, token: str) -> str:
        """The marker a batch of generated ids leaves for a minute (``enqueue_many.lua``): the same
        call sent again finds it and writes nothing. ``token`` '' gives a never-set placeholder."""
        return f"{self.base}b:{token}"

    def inbox(self, inbox_id: str) -> str:
        """LIST a waiting client pops finished tasks' outcomes from (``reply:``, one per client and
        queue, in the queue's slot; expires a while after its last push). ``inbox_id`` '' gives
        the watch hash, the placeholder a finishing script gets when nobody waits."""
        return f"{self.base}reply:{inbox_id}" if inbox_id else self.watch

    def lock(self, digest: str) -> str:
        """Uniqueness lock; ``digest`` '' gives the never-set placeholder used by non-unique tasks."""
        return f"{self.base}u:{digest}" if digest else self.placeholder


_cache: dict[str, QueueKeys] = {}


def queue_keys(name: str) -> QueueKeys:
    """Return the (cached) key set of queue ``name``, validating the name once."""
    keys = _cache.get(name) if isinstance(name, str) else None  # else validate_queue raises
    if keys is None:
        keys = _cache[name] = QueueKeys(validate_queue(name))
    return keys
