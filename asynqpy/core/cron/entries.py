"""Periodic tasks (sans-I/O): scheduler entries, their ticks and which tick is due.

An entry enqueues a task of ``task_type`` on each tick of a cron expression (5 fields, or 6 with
seconds first; parsed and evaluated by cronsim, in the entry's IANA time zone, with Debian cron's
DST rules: a time skipped by a spring-forward runs once right after the change, a time repeated by
a fall-back runs once) or of a fixed interval (every N seconds, aligned to the Unix epoch, so every
scheduler computes the same ticks). A tick is identified by its time in Unix milliseconds; the
task it enqueues gets the id ``cron:<entry>:<tick ms>``.

Which ticks to fire (:func:`due_ticks`): those at or before now that are after the entry's last
fired tick and after its creation, oldest first. A tick is late, not missed, while it is at most
``grace`` old: it is still enqueued. An older one was missed (every scheduler was down) and the
entry's ``missed`` policy decides: ``"skip"`` (the default) leaves it, ``"last"`` runs the latest
missed tick once.
Every scheduler computes the same answer; the fire script (lua/cron_fire.lua) lets exactly one
of them enqueue it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import msgpack

from ..model import codec
from ..model.codec import TAG_LEN, Message
from ..model.errors import EntryNotFoundError, InvalidArgumentError, SignatureError
from ..model.options import MAX_SECONDS, _is_text
from ..model.task import ms_to_datetime
from ..security.signing import Signer, has_tag
from ..spine.broker import Broker, Call
from ..spine.keys import ALL_QUEUES, CRON_QUEUES, queue_keys, refuse_dot_segment, validate_name, validate_queue

MISSED = ("skip", "last")
"""What an entry does with ticks missed while no scheduler ran: skip them, or run the last one once."""
GRACE_MS = 60_000
"""A tick at most this old (ms) is late, not missed: it is still enqueued."""
HISTORY = 20
"""Enqueues remembered per entry (newest first)."""
ENTRY_OPTIONS = frozenset({"max_retry", "timeout", "retention", "retry_delay", "headers", "priority", "tenant"})
"""The enqueue options an entry may carry (its queue is the entry's own; the id comes from the tick)."""
if TYPE_CHECKING:
    from ..inspector.inspection import Plan

_NAME = re.compile(r"^[^\s{}]{1,200}$")


_MAX_MS = int(datetime.max.replace(tzinfo=timezone.utc).timestamp() * 1000)
"""The latest time a datetime holds, in Unix ms."""


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


@lru_cache(maxsize=256)
def zone(tz: str) -> Any:
    """The IANA time zone ``tz`` (a ZoneInfo); InvalidArgumentError naming ``tz`` if unknown."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(tz, str) or not tz or tz.startswith("/") or ".." in tz:
        raise InvalidArgumentError(f"tz must be an IANA time zone name such as 'Europe/Berlin', got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgumentError(f"tz: unknown time zone {tz!r} (an IANA name such as 'Europe/Berlin' or "
                                   "'UTC')") from None


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:
        raise InvalidArgumentError("cron expressions need cronsim: "
                                   "pip install '.[cron]' in asynqpy's repository") from None
    return cronsim


def check_cron(expr: str, tz: str = "UTC") -> None:
    """Raise InvalidArgumentError naming the bad part of a cron expression (or of ``tz``)."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidArgumentError(f"cron must be a cron expression such as '*/5 * * * *', got {expr!r}")
    cs = _cronsim()
    try:
        cs.CronSim(expr, datetime.now(zone(tz)))
    except cs.CronSimError as exc:
        raise InvalidArgumentError(f"cron: {exc} in {expr!r} (5 fields: minute hour day-of-month month "
                                   "day-of-week; or 6, with seconds first)") from None


@dataclass(frozen=True)
class Entry:
    """A periodic task: its ``name`` (unique per queue), what it enqueues (``task_type``,
    ``payload``, ``options``: max_retry, timeout, retention, retry_delay, headers), on which ticks
    (``cron`` in ``tz``, or ``every`` seconds), into which ``queue``, and what to do with missed
    ticks (``missed``). ``created_ms``: ticks at or before it never fire. ``owner``: who declared
    it in code (``"app:<name>"`` for an :class:`asynqpy.App`'s periodic tasks; empty for an entry
    added by the CLI or the Inspector): a starting owner removes its entries it no longer declares
    (:func:`prune_plan`)."""

    name: str
    task_type: str
    payload: Any = None
    queue: str = "default"
    cron: str | None = None
    every: float | None = None
    tz: str = "UTC"
    missed: str = "skip"
    options: Mapping[str, Any] = field(default_factory=dict)
    created_ms: int = 0
    owner: str = ""

    def spec(self) -> str:
        """The schedule as text: the cron expression (with its zone unless UTC) or 'every Ns'."""
        if self.cron is not None:
            return self.cron if self.tz == "UTC" else f"{self.cron} ({self.tz})"
        return f"every {self.every:g}s"

    # -- ticks -------------------------------------------------------------------------------

    def latest_at_or_before(self, ms: int) -> int | None:
        """The latest tick at or before ``ms`` (None if there is none in the last 50 years)."""
        if self.every is not None:
            step = int(self.every * 1000)
            return ms // step * step
        it = _cronsim().CronSim(self.cron, _utc(ms).astimezone(zone(self.tz)).replace(microsecond=1), reverse=True)
        try:
            return int(next(it).timestamp() * 1000)
        except StopIteration:
            return None

    def first_after(self, ms: int) -> int | None:
        """The first tick strictly after ``ms`` (None if there is none in the next 50 years)."""
        if self.every is not None:
            step = int(self.every * 1000)
            return (ms // step + 1) * step
        it = _cronsim().CronSim(self.cron, _utc(ms).astimezone(zone(self.tz)))
        try:
            return int(next(it).timestamp() * 1000)
        except StopIteration:
            return None


def check_name(name: object, new: bool = False) -> str:
    """``name`` if it is a valid entry name, else InvalidArgumentError. ``new``: a name being given
    to an entry, which is also not ``.`` or ``..`` (the web console names an entry in a URL's path;
    an entry stored so before stays reachable by the other calls)."""
    if isinstance(name, str) and name:
        validate_name("entry name", name, 200)
    if not isinstance(name, str) or not _NAME.match(name) or not _is_text(name):
        raise InvalidArgumentError(f"an entry name is 1 to 200 characters without spaces or braces, got {name!r}")
    return refuse_dot_segment("entry name", name) if new else name


def make_entry(name: str, task_type: str, payload: Any = None, *, queue: str = "default", cron: str | None = None,
               every: float | None = None, tz: str = "UTC", missed: str = "skip", created_ms: int = 0,
               max_payload_bytes: int = 1 << 20, **options: Any) -> Entry:
    """A validated :class:`Entry` (InvalidArgumentError naming the bad argument otherwise)."""
    check_name(name, new=True)
    validate_queue(queue)
    if (cron is None) == (every is None):
        raise InvalidArgumentError("give an entry either cron='...' or every=seconds (one of them)")
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not 1 <= every < math.inf \
                or every * 1000 != int(every * 1000):
            raise InvalidArgumentError(f"every must be a number of seconds >= 1 (whole milliseconds), got {every!r}")
        if every > MAX_SECONDS:
            raise InvalidArgumentError(f"every must be at most 100 years ({MAX_SECONDS} seconds), got {every!r}")
        every = float(every)
        zone(tz)
    else:
        check_cron(cron, tz)  # type: ignore[arg-type]
    if missed not in MISSED:
        raise InvalidArgumentError(f"missed must be one of {', '.join(MISSED)}, got {missed!r}")
    unknown = options.keys() - ENTRY_OPTIONS
    if unknown:
        from ..model.options import unknown_options

        raise InvalidArgumentError(unknown_options("periodic task option", unknown, sorted(ENTRY_OPTIONS)))
    from ..model.options import prepare

    prepare(task_type, payload, queue=queue, max_payload_bytes=max_payload_bytes, **options)  # validates them all
    return Entry(name, task_type, payload, queue, cron, every, tz, missed, dict(options), created_ms)


# -- stored form ---------------------------------------------------------------------------------


def encode_entry(e: Entry) -> bytes:
    """The definition as stored in the queue's cron hash (msgpack map; the payload as the task's;
    ``owner`` only when there is one)."""
    d = {"v": 1, "type": e.task_type, "payload": codec.encode_payload(e.payload, "payload"), "cron": e.cron,
         "every": e.every, "tz": e.tz, "missed": e.missed, "options": dict(e.options), "created": e.created_ms}
    if e.owner:
        d["owner"] = e.owner
    return bytes(msgpack.packb(d, use_bin_type=True))


def stored_entry(e: Entry, signer: Signer | None) -> bytes:
    """The entry as stored: its definition, with a tag (bound to its queue and name) when the
    writer holds signing keys."""
    data = encode_entry(e)
    return data if signer is None else signer.seal_entry(e.queue, e.name, data)


def entry_signature(signer: Signer | None, queue: str, name: str, data: bytes) -> str:
    """What a reader can say of a stored entry's tag: with keys, ``"verified"`` or why it fails
    (``"bad signature: ..."``: a keyed scheduler never fires it); without, ``"signed"`` (a tag,
    unchecked) or ``"unsigned"``."""
    if signer is None:
        return "signed" if has_tag(data) else "unsigned"
    try:
        signer.open_entry(queue, name, data)
    except SignatureError as exc:
        return str(exc)
    return VERIFIED


VERIFIED = "verified"


def decode_entry(queue: str, name: str, data: bytes) -> Entry:
    """An entry from its stored form (a tag, if any, is not checked here: see
    :func:`entry_signature`); InvalidArgumentError if it is not one."""
    try:
        if has_tag(data):
            try:
                msgpack.unpackb(data, raw=False)
            except msgpack.ExtraData:
                data = data[:-TAG_LEN]
        d = msgpack.unpackb(data, raw=False)
        payload = msgpack.unpackb(d["payload"], raw=False, strict_map_key=False)
        owner = d.get("owner") or ""
        if not isinstance(owner, str):
            raise TypeError(f"owner is {type(owner).__name__}")
        return Entry(name, d["type"], payload, queue, d["cron"], d["every"], d["tz"],
                     d["missed"], d.get("options") or {}, int(d["created"]), owner)
    except Exception as exc:  # noqa: BLE001 - whatever is stored there
        raise InvalidArgumentError(f"scheduler entry {name!r} of queue {queue!r} is not readable: {exc}") from None


# -- which tick -----------------------------------------------------------------------------------


def due_ticks(e: Entry, last_ms: int, now_ms: int, grace_ms: int = GRACE_MS, limit: int = 100) -> list[int]:
    """The ticks to fire now, oldest first (at most ``limit``): every tick at or before
    ``now_ms`` that is after ``last_ms`` (the last tick fired, 0 = none) and after the entry's
    creation, and at most ``grace_ms`` old (late, not missed); if there is none such but older
    ones were missed, the latest of them when the entry runs the ``"last"`` missed tick."""
    floor = max(last_ms, e.created_ms)
    latest = e.latest_at_or_before(now_ms)
    if latest is None or latest <= floor:
        return []
    out: list[int] = []
    t = e.first_after(max(floor, now_ms - grace_ms - 1))
    while t is not None and t <= now_ms and len(out) < limit:
        out.append(t)
        t = e.first_after(t)
    if not out and e.missed == "last":
        out.append(latest)
    return out


def due_tick(e: Entry, last_ms: int, now_ms: int, grace_ms: int = GRACE_MS) -> int | None:
    """The oldest tick to fire now (see :func:`due_ticks`), or None."""
    ticks = due_ticks(e, last_ms, now_ms, grace_ms, 1)
    return ticks[0] if ticks else None


def tick_task_id(name: str, tick_ms: int) -> str:
    """The id of the task an entry enqueues for a tick: the same for every scheduler."""
    return f"cron:{name}:{tick_ms}"


@dataclass(frozen=True)
class Fired:
    """One enqueue of an entry (its history, newest first): the tick (0 for a run-now), the
    task's id, when it was enqueued (Redis time, ms) and how late after the tick."""

    tick_ms: int
    task_id: str
    enqueued_ms: int

    @property
    def late_ms(self) -> int:
        return self.enqueued_ms - self.tick_ms if self.tick_ms else 0

    @property
    def tick(self) -> datetime | None:
        return _utc(self.tick_ms) if self.tick_ms else None

    @property
    def enqueued_at(self) -> datetime:
        return _utc(self.enqueued_ms)


def parse_history(items: list[bytes]) -> list[Fired]:
    """History entries ('tick_ms task_id enqueued_ms', newest first) as :class:`Fired`."""
    out = []
    for raw in items:
        try:
            tick, id, at = _split(raw)
            fired = Fired(int(tick), id, int(at))
        except (ValueError, UnicodeDecodeError):
            continue
        if 0 <= fired.tick_ms <= _MAX_MS and 0 <= fired.enqueued_ms <= _MAX_MS:  # else not one it wrote
            out.append(fired)
    return out


def _split(raw: bytes) -> tuple[str, str, str]:
    text = raw.decode()
    tick, rest = text.split(" ", 1)
    id, at = rest.rsplit(" ", 1)
    return tick, id, at


# -- plans (see asynqpy.core.inspector.inspection: each yields one round trip's calls) -------------------------


@dataclass
class QueueEntries:
    """What a scheduler knows of one queue's entries: definitions (stored bytes and decoded),
    last fired ticks, paused names, and definitions that could not be read."""

    defs: dict[str, tuple[bytes, Entry]] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    paused: set[str] = field(default_factory=set)
    unreadable: dict[str, str] = field(default_factory=dict)
    signature: dict[str, str] = field(default_factory=dict)
    """name -> :func:`entry_signature` for the reader's keys."""

    def refused(self, name: str) -> str | None:
        """Why a keyed reader must not fire entry ``name`` (its tag does not verify), else None."""
        sig = self.signature.get(name, VERIFIED)
        return sig if sig.startswith("bad signature") else None


def _raise(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def load_plan(signer: Signer | None = None) -> Plan[dict[str, QueueEntries]]:
    """Every queue's entries (two round trips: the queues with entries, then theirs), each with
    what ``signer`` says of its tag (:attr:`QueueEntries.signature`)."""
    (queues,) = yield [Call(lambda r: sorted(_text(q) for q in r), command=("SMEMBERS", CRON_QUEUES))]
    queues = [q for q in _raise(queues) if _valid_queue(q)]
    calls: list[Call[Any]] = []
    for q in queues:
        k = queue_keys(q)
        calls += [Call(lambda r: r, command=("HGETALL", k.cron)), Call(lambda r: r, command=("HGETALL", k.cron_last)),
                  Call(lambda r: r, command=("SMEMBERS", k.cron_paused))]
    replies = yield calls
    out: dict[str, QueueEntries] = {}
    for i, q in enumerate(queues):
        defs, last, paused = (_raise(r) for r in replies[3 * i:3 * i + 3])
        qe = QueueEntries()
        for name_b, data in defs.items():
            name = _text(name_b)
            try:
                qe.defs[name] = (data, decode_entry(q, name, data))
            except InvalidArgumentError as exc:
                qe.unreadable[name] = str(exc)
            else:
                qe.signature[name] = entry_signature(signer, q, name, data)
        for name_b, ms in last.items():
            try:
                qe.last[_text(name_b)] = int(ms)
            except ValueError:
                pass
        qe.paused = {_text(n) for n in paused}
        out[q] = qe
    return out


def _valid_queue(q: str) -> bool:
    try:
        validate_queue(q)
    except InvalidArgumentError:
        return False
    return True


def register_plan(entries: list[Entry], now_ms: int, signer: Signer | None = None) -> Plan[list[Entry]]:
    """Store entries declared in code (signed with ``signer``'s first key, if any): a new entry,
    or one whose definition changed (or, with a signer, whose stored tag does not verify), is
    written with ``created_ms`` = now (its earlier ticks never fire); an unchanged one is left as
    it is (it keeps its creation time, so a restart right after a tick still fires it). Returns
    the entries as stored."""
    queues = sorted({e.queue for e in entries})
    if not queues:
        return []
    stored = yield [Call(lambda r: r, command=("SADD", CRON_QUEUES, *queues)),
                    Call(lambda r: r, command=("SADD", ALL_QUEUES, *queues))] + [
        Call(lambda r: r, command=("HGET", queue_keys(e.queue).cron, e.name)) for e in entries]
    _raise(stored[0])
    _raise(stored[1])
    out: list[Entry] = []
    writes: list[Call[Any]] = []
    for e, old in zip(entries, stored[2:]):
        entry, write = _to_store(e, _trusted(e, _raise(old), signer), now_ms)
        if write:
            writes.append(Call(lambda r: r, command=("HSET", queue_keys(e.queue).cron, e.name,
                                                     stored_entry(entry, signer))))
        out.append(entry)
    if writes:
        for r in (yield writes):
            _raise(r)
    return out


def _trusted(declared: Entry, old: bytes | None, signer: Signer | None) -> Entry | None:
    """The stored entry of ``declared``'s name if it can be built on: it decodes and, for a keyed
    writer, its tag verifies. A keyed writer never builds on what it could not check (an unsigned
    copy is written again, as new and signed)."""
    if old is None:
        return None
    try:
        current = decode_entry(declared.queue, declared.name, old)
    except InvalidArgumentError:
        return None
    if signer is not None and entry_signature(signer, declared.queue, declared.name, old) != VERIFIED:
        return None
    return current


def _to_store(declared: Entry, current: Entry | None, now_ms: int) -> tuple[Entry, bool]:
    """The entry to keep for ``declared`` given the trusted stored one, and whether to write it:
    the stored one unchanged; the stored one with its new owner when only the owner is new
    (declared by an App now: it keeps its state); else ``declared``, created now."""
    if current is not None and _same(current, declared):
        return current, False
    if current is not None and _same(current, replace(declared, owner=current.owner)):
        return replace(current, owner=declared.owner), True
    return replace(declared, created_ms=now_ms), True


def prune_plan(broker: Broker, owner: str, declared: list[Entry]) -> Plan[list[Entry]]:
    """Remove the stored entries of ``owner`` (in any queue) that are not among ``declared``: an
    App's periodic task renamed, moved to another queue or deleted from the code. Entries of
    other owners, and those without one (added by the CLI or the Inspector), stay. Returns the
    entries removed."""
    if not owner:
        return []
    loaded = yield from load_plan()
    keep = {(e.queue, e.name) for e in declared}
    stale = [e for q, qe in sorted(loaded.items()) for name, (_, e) in sorted(qe.defs.items())
             if e.owner == owner and (q, name) not in keep]
    if stale:
        calls = [broker.cron_remove(e.queue, e.name) for e in stale]
        for r in (yield calls):
            _raise(r)
    return stale


def _same(a: Entry, b: Entry) -> bool:
    """Do two entries define the same thing (creation times aside)? Compared as stored (a tuple in
    a payload is stored as a list)."""
    return encode_entry(replace(a, created_ms=0)) == encode_entry(replace(b, created_ms=0))


def add_plan(entry: Entry, signer: Signer | None = None) -> Plan[None]:
    """Store (or replace) one entry, as an operator's ``cron add`` does (signed with ``signer``'s
    first key, if any: a keyed scheduler fires only entries that verify)."""
    replies = yield [Call(lambda r: r, command=("SADD", CRON_QUEUES, entry.queue)),
                     Call(lambda r: r, command=("SADD", ALL_QUEUES, entry.queue)),
                     Call(lambda r: r, command=("HSET", queue_keys(entry.queue).cron, entry.name,
                                                stored_entry(entry, signer)))]
    for r in replies:
        _raise(r)


@dataclass(frozen=True)
class EntryInfo:
    """A scheduler entry as the Inspector shows it: the entry, whether it is paused, its last
    fired tick and next tick (UTC), the last task it enqueued and its recent history."""

    entry: Entry
    paused: bool
    last_tick: datetime | None
    next_tick: datetime | None
    last_task_id: str | None
    history: list[Fired]
    signature: str = "unsigned"
    """What the reader can say of the entry's tag (:func:`entry_signature`): ``"verified"`` or
    ``"bad signature: ..."`` (a keyed scheduler does not fire it) for a reader with the signing
    keys; ``"signed"`` or ``"unsigned"`` for one without."""

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def queue(self) -> str:
        return self.entry.queue


def entries_plan(queue: str | None, now_ms: int, history: int = HISTORY,
                 signer: Signer | None = None) -> Plan[list[EntryInfo]]:
    """Every entry (of ``queue``, or of every queue), with history and what ``signer`` says of
    its tag, sorted by queue and name."""
    loaded = yield from load_plan(signer)
    found = [(q, name, qe) for q, qe in sorted(loaded.items()) if queue is None or q == queue
             for name in sorted(qe.defs)]
    replies = yield [Call(lambda r: r, command=("LRANGE", queue_keys(q).cron_history(name), 0, history - 1))
                     for q, name, _ in found]
    out = []
    for (_, name, qe), hist in zip(found, replies):
        e = qe.defs[name][1]
        fired = parse_history(_raise(hist))
        last = qe.last.get(name, 0)
        nxt = None if name in qe.paused or qe.refused(name) else e.first_after(max(now_ms, last))
        # (ms_to_datetime: an entry stored before every= was bounded has ticks past year 9999)
        out.append(EntryInfo(e, name in qe.paused, ms_to_datetime(last), ms_to_datetime(nxt or 0),
                             fired[0].task_id if fired else None, fired, qe.signature.get(name, "unsigned")))
    return out


def tick_message(e: Entry, id: str, now_ms: int, max_payload_bytes: int = 1 << 20) -> Message:
    """The message of the task ``e`` enqueues under ``id`` (its options applied)."""
    from ..model.options import prepare

    return prepare(e.task_type, e.payload, queue=e.queue, task_id=id, now=now_ms / 1000,
                   max_payload_bytes=max_payload_bytes, **e.options).msg


def fire_call(broker: Broker, e: Entry, definition: bytes, tick_ms: int, now_ms: int,
              keep: int = HISTORY) -> tuple[str, Call[tuple[int, int]]]:
    """The task id and the cron_fire call that enqueues ``e``'s task for ``tick_ms`` (0 = now)."""
    id = tick_task_id(e.name, tick_ms) if tick_ms else f"cron:{e.name}:now:{now_ms}"
    return id, broker.cron_fire(e.queue, e.name, definition, tick_ms, id, tick_message(e, id, now_ms), keep)


FIRED, ALREADY, GONE, CHANGED, PAUSED, EARLY = 1, 0, -1, -2, -3, -4
"""cron_fire's codes (lua/cron_fire.lua)."""


def _entry_code(queue: str, name: str) -> Callable[[Any], int]:
    def parse(reply: Any) -> int:
        if int(reply) == 0:
            raise EntryNotFoundError(f"no scheduler entry {name!r} in queue {queue!r}")
        return int(reply)

    return parse


def remove_plan(broker: Broker, queue: str, name: str) -> Plan[None]:
    """Forget an entry (EntryNotFoundError if there is none)."""
    check_name(name)
    validate_queue(queue)
    call = broker.cron_remove(queue, name)
    (r,) = yield [Call(_entry_code(queue, name), call.script, call.keys, call.args)]
    _raise(r)


def pause_plan(broker: Broker, queue: str, name: str, paused: bool) -> Plan[None]:
    """Pause or resume an entry (EntryNotFoundError if there is none)."""
    check_name(name)
    validate_queue(queue)
    call = broker.cron_pause(queue, name, paused)
    (r,) = yield [Call(_entry_code(queue, name), call.script, call.keys, call.args)]
    _raise(r)


def run_now_plan(broker: Broker, queue: str, name: str, now_ms: int) -> Plan[str]:
    """Enqueue an entry's task now, outside its schedule (paused or not); returns the task id."""
    check_name(name)
    validate_queue(queue)
    (data,) = yield [Call(lambda r: r, command=("HGET", queue_keys(queue).cron, name))]
    if _raise(data) is None:
        raise EntryNotFoundError(f"no scheduler entry {name!r} in queue {queue!r}")
    e = decode_entry(queue, name, data)
    sig = entry_signature(broker.signer, queue, name, data)
    if sig.startswith("bad signature"):  # never sign the task of an entry that does not verify
        raise SignatureError(f"scheduler entry {name!r} of queue {queue!r} is not run: {sig} (add it again "
                             "with the signing key)")
    id, call = fire_call(broker, e, data, 0, now_ms)
    (r,) = yield [call]
    code, _ = _raise(r)
    if code == GONE or code == CHANGED:
        raise EntryNotFoundError(f"scheduler entry {name!r} of queue {queue!r} changed meanwhile; try again")
    if code != FIRED:
        raise InvalidArgumentError(f"scheduler entry {name!r}: its task {id} exists already")
    return id
