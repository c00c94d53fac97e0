"""Migrations of a store from one wire protocol version to the next (``asynqpy upgrade``), sans I/O.

A :class:`Migration` moves a store from protocol ``n`` to ``n + 1``; it is written as a plan of
batches: ``batch(cursor, count, dry_run)`` yields round trips (lists of :class:`Call`) and returns a
:class:`Batch` (where the next batch starts, or None when the step is done, and what it saw and
changed). The :class:`Registry` holds each release's migrations; :data:`REGISTRY` is this
release's (none yet: every store is protocol 1, docs/releases.md).

:func:`upgrade` is the plan of the whole run, for any executor (``asynqpy.redisio.upgrade`` drives
it):

- it reads the store's version (``asynqpy:protocol``), the cursor of a run that was stopped
  (:data:`~asynqpy.core.spine.keys.UPGRADE`) and the live servers' records: a store newer than the
  target is refused (:class:`ProtocolVersionError`), and so is a migration while a live server
  speaks an older protocol than the target (it would meet data it does not read), unless forced;
- each step runs batch after batch, and after each batch stores its cursor in Redis: a run killed
  at any point is resumed by the next one from its last stored cursor; the version is stamped
  (``SET``) only once a step's last batch is done, then the cursor is deleted;
- a dry run writes nothing: it reads what each step would change, every step on the store as it is
  (a later step's count does not see what an earlier one would have changed).

What a step may do, so that the run is safe while workers run, idempotent and resumable: each
change is one atomic command or one script (never a read, then a write a worker could come between),
and making it twice leaves what making it once does (a batch redone after a kill, an HSCAN that
returns an element twice, two runs at once). :func:`task_batches` makes the usual kind: one call per
stored task, every task of every queue, resumable at any batch.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..model.errors import AsynqpyError
from ..server.record import unpack
from .calls import Call
from .keys import ALL_QUEUES, PROTOCOL, SERVERS, UPGRADE, QueueKeys, known_queues, queue_keys, server_info
from .protocol import ABSENT_MEANS, PROTOCOL_VERSION, ProtocolVersionError, read_version

T = TypeVar("T")
Rounds = Generator[list[Call[Any]], list[Any], T]
"""A plan of round trips: yields the calls of one round trip, is sent their replies (an exception
in place of a failed one), returns its answer."""

DEFAULT_BATCH = 500
"""Items a batch reads (the ``COUNT`` of its scan) by default: ``asynqpy upgrade --batch``."""


class MigrationError(AsynqpyError):
    """An upgrade that cannot run: no migration between two versions, or a live server that would
    not read the migrated store (``asynqpy upgrade``: one line, exit 2); nothing was written."""


@dataclass(frozen=True)
class Batch:
    """What one batch did: ``cursor``, where the next one starts (None: the step is done); ``seen``,
    the items it read; ``changed``, those it changed (a dry run: would change)."""

    cursor: str | None
    seen: int = 0
    changed: int = 0


@dataclass(frozen=True)
class Migration:
    """One step from protocol ``from_version`` to ``to_version`` (= from_version + 1). ``batch``: the
    plan of one batch from ``cursor`` ('' = the start) reading about ``count`` items; with
    ``dry_run`` it writes nothing and counts what it would change."""

    name: str
    from_version: int
    to_version: int
    summary: str
    batch: Callable[[str, int, bool], Rounds[Batch]]


class Registry:
    """The migrations a release knows, one per protocol version it moves a store from."""

    def __init__(self, *migrations: Migration) -> None:
        self._from: dict[int, Migration] = {}
        for m in migrations:
            self.add(m)

    def add(self, m: Migration) -> None:
        """Register ``m``; ValueError if it does not go from one version to the next, or if a
        migration from its version (or of its name) is registered already."""
        if m.to_version != m.from_version + 1 or m.from_version < 1:
            raise ValueError(f"migration {m.name!r} goes from {m.from_version} to {m.to_version}: a step goes "
                             "from one protocol version to the next")
        if not m.name or " " in m.name:
            raise ValueError(f"migration name {m.name!r}: a non-empty word")
        if m.from_version in self._from or any(o.name == m.name for o in self._from.values()):
            raise ValueError(f"migration {m.name!r}: one from protocol {m.from_version} or of that name exists")
        self._from[m.from_version] = m

    def path(self, stored: int, target: int) -> list[Migration]:
        """The steps from protocol ``stored`` to ``target``, in order (none when equal);
        MigrationError when a step is missing."""
        steps = []
        for version in range(stored, target):
            m = self._from.get(version)
            if m is None:
                raise MigrationError(f"no migration from protocol {version} to {version + 1} in this release: "
                                     f"upgrade through a release that has one (docs/releases.md)")
            steps.append(m)
        return steps

    def __iter__(self) -> Any:
        return iter(sorted(self._from.values(), key=lambda m: m.from_version))


REGISTRY = Registry()
"""This release's migrations: none, since every store is protocol 1 (the only version so far)."""


@dataclass
class StepReport:
    """One step of a run: where it started (``resumed_from``: the cursor a stopped run left, ''
    = the start), its batches and counts (with those of the run it resumed), whether it is done."""

    name: str
    from_version: int
    to_version: int
    summary: str
    resumed_from: str = ""
    batches: int = 0
    seen: int = 0
    changed: int = 0
    done: bool = False


@dataclass
class UpgradeReport:
    """A run of :func:`upgrade`: the version found (``stamped``: whether the key was there), the
    target, the steps, the version the store has now, and the live servers that speak an older
    protocol than the target (a real run refuses while there are any, unless forced)."""

    found: int
    stamped: bool
    target: int
    dry_run: bool
    steps: list[StepReport] = field(default_factory=list)
    now: int = 0
    old_servers: list[str] = field(default_factory=list)
    stale_cursor: str = ""


def _same(reply: Any) -> Any:
    return reply


def _check(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    return replies


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _old_servers(ids: list[Any], records: list[Any], target: int) -> list[str]:
    """The live servers (of ``ids``, whose records are ``records``) that speak a protocol older
    than ``target`` (a record without the field: a release older than it, protocol 1)."""
    old = []
    for sid, raw in zip(ids, records):
        if raw is None or isinstance(raw, BaseException):
            continue  # (it stopped since)
        try:
            info = unpack(raw)
        except Exception:  # noqa: BLE001 - a record that is not one: not a server of any release
            continue
        if (info.protocol or ABSENT_MEANS) < target:
            old.append(f"{_text(sid)} (asynqpy {info.asynqpy_version or '?'}, protocol {info.protocol or 1})")
    return old


def upgrade(registry: Registry, now_ms: int, target: int = PROTOCOL_VERSION, count: int = DEFAULT_BATCH,
            dry_run: bool = False, force: bool = False,
            on_batch: Callable[[StepReport], None] | None = None) -> Rounds[UpgradeReport]:
    """The plan of ``asynqpy upgrade`` (see the module's docstring): migrate the store to protocol
    ``target`` with ``registry``'s steps, ``count`` items a batch; ``on_batch`` is told after each."""
    report, steps, state = yield from _survey(registry, now_ms, target, dry_run or force)
    report.dry_run = dry_run
    for m in steps:
        step = StepReport(m.name, m.from_version, m.to_version, m.summary)
        report.steps.append(step)
        yield from _step(m, step, state if state.get("step") == m.name else {}, count, dry_run, on_batch)
        if not dry_run:
            _check((yield [Call(_same, command=("SET", PROTOCOL, str(m.to_version)))]))
            report.now = m.to_version
            _check((yield [Call(_same, command=("DEL", UPGRADE))]))
            state = {}
    if state and not dry_run:  # a cursor left by a run killed after its last stamp
        report.stale_cursor = state.get("step", "")
        _check((yield [Call(_same, command=("DEL", UPGRADE))]))
    if not (report.stamped or steps or dry_run):  # stamp what the store is (the first writer would)
        _check((yield [Call(_same, command=("SET", PROTOCOL, str(report.found), "NX"))]))
        report.stamped = True
    return report


def _survey(registry: Registry, now_ms: int, target: int,
            anyway: bool) -> Rounds[tuple[UpgradeReport, list[Migration], dict[str, str]]]:
    """The store's version, the steps to ``target``, the cursor a stopped run left, and the live
    servers of an older protocol (MigrationError while there are any, unless ``anyway``)."""
    raw, cursor, live = _check((yield [Call(_same, command=("GET", PROTOCOL)),
                                       Call(_same, command=("HGETALL", UPGRADE)),
                                       Call(_same, command=("ZRANGE", SERVERS, now_ms, "+inf", "BYSCORE"))]))
    found = ABSENT_MEANS if raw is None else _found(raw, target)
    report = UpgradeReport(found, raw is not None, target, False, now=found)
    steps = registry.path(found, target)
    if steps and live:
        records = yield [Call(_same, command=("GET", server_info(_text(sid)))) for sid in live]
        report.old_servers = _old_servers(list(live), records, target)
    if steps and report.old_servers and not anyway:
        raise MigrationError(f"{len(report.old_servers)} live server(s) speak a protocol older than {target} and would "
                             f"not read the migrated store: {', '.join(report.old_servers[:5])}; replace them with "
                             "this release first (docs/releases.md), or use --force; nothing was written")
    return report, steps, {_text(k): _text(v) for k, v in (cursor or {}).items()}


def _step(m: Migration, step: StepReport, resumed: dict[str, str], count: int, dry_run: bool,
          on_batch: Callable[[StepReport], None] | None) -> Rounds[None]:
    """Run step ``m`` batch by batch from the start, or from where a stopped run left it
    (``resumed``: its cursor and counts), storing the cursor after each batch (not in a dry run)."""
    at = step.resumed_from = resumed.get("cursor", "")
    step.seen, step.changed = int(resumed.get("seen", 0)), int(resumed.get("changed", 0))
    while True:
        batch = yield from m.batch(at, count, dry_run)
        step.batches += 1
        step.seen += batch.seen
        step.changed += batch.changed
        if not dry_run and batch.cursor is not None:
            _check((yield [Call(_same, command=("HSET", UPGRADE, "step", m.name, "cursor", batch.cursor,
                                                "seen", step.seen, "changed", step.changed))]))
        if on_batch is not None:
            on_batch(step)
        if batch.cursor is None:
            step.done = True
            return
        at = batch.cursor


def _found(raw: Any, target: int) -> int:
    """The version ``raw`` (the key's value) names; ProtocolVersionError if it is not one, or is
    newer than ``target``."""
    text = _text(raw)
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 9 and int(text) > 0):
        read_version(raw)  # raises, saying what the key holds
    stored = int(text)
    if stored > target:
        raise ProtocolVersionError(
            f"this Redis holds asynqpy protocol {stored}, newer than this upgrade's target (protocol {target}): "
            "upgrade asynqpy here; a store is never moved back (docs/releases.md); nothing was written", stored)
    return stored


def task_batches(change: Callable[[QueueKeys, str, bytes], Call[Any] | None]) -> Callable[[str, int, bool],
                                                                                         Rounds[Batch]]:
    """A migration's ``batch`` that goes over every stored task of every queue (the queues of
    ``asynqpy:queues`` in name order, each one's task hash by HSCAN): ``change(queue keys, id,
    stored value)`` is the call that changes one task (a script, or one command: atomic and
    idempotent), or None when it needs none; a call's reply counts as a change when truthy.
    The cursor is '<queue> <HSCAN cursor>': a queue deleted meanwhile is passed over."""

    def batch(cursor: str, count: int, dry_run: bool) -> Rounds[Batch]:
        queue, _, scan = cursor.partition(" ")
        (members,) = _check((yield [Call(_same, command=("SMEMBERS", ALL_QUEUES))]))
        queues = [q for q in known_queues(members) if q >= queue]
        if not queues:
            return Batch(None)
        if queues[0] != queue:
            queue, scan = queues[0], "0"
        q = queue_keys(queue)
        ((next_scan, items),) = _check((yield [Call(_same, command=("HSCAN", q.tasks, scan or "0", "COUNT", count))]))
        pairs = _pairs(items)
        calls = [c for c in (change(q, _text(k), v) for k, v in pairs) if c is not None]
        changed = len(calls)
        if calls and not dry_run:
            changed = sum(1 for reply in _check((yield calls)) if reply)
        return Batch(_next(queues, queue, next_scan), len(pairs), changed)

    return batch


def _pairs(items: Any) -> list[tuple[Any, Any]]:
    """HSCAN's field-value pairs, as redis-py parsed them (a dict) or not (a flat list)."""
    return list(items.items()) if isinstance(items, dict) else list(zip(items[::2], items[1::2]))


def _next(queues: list[str], queue: str, scan: Any) -> str | None:
    """Where :func:`task_batches`' next batch starts: the rest of ``queue``'s HSCAN, else the next
    queue of ``queues`` from its start (None: every queue done)."""
    if int(scan) != 0:
        return f"{queue} {_text(scan)}"
    later = [name for name in queues if name > queue]
    return f"{later[0]} 0" if later else None
