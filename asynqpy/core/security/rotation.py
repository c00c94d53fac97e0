"""Key rotation's re-encryption (``asynqpy keys rotate``), as a plan (sans-I/O): every stored task
whose encrypted values were sealed with a key other than the ring's newest is sealed again with the
newest, and every tenant key's record is sealed again with it (docs/encryption.md "Rotation").

It walks the queues in name order and each queue's tasks hash with ``HSCAN`` (a bounded page per
round trip: Redis serves everyone else in between), and writes each page's rewrites in one round
trip through lua/rewrap.lua, which replaces a value only if it is still the one read and not
active. So it is safe while workers run: a task that ran, moved or was edited meanwhile is left
for the next pass; an active task is skipped (its worker writes it back from what it holds, still
under the old key: a later pass, or a second run, takes it). It is resumable: the queue and the
HSCAN cursor are kept in Redis (HASH ``asynqpy:keys:rotate``) after every page, and a run started
again goes on from there (``restart`` begins anew). Signed messages are verified and signed again
(:func:`~asynqpy.core.security.signing.trust_gate`); one that does not verify is left alone.

An offloaded payload (docs/offload.md) is rotated too when the caller gives the blob store: its
blob is read and opened, sealed with the newest key and written under a **new** blob name (never
in place: a worker may be reading the old one), then the task's reference is rewritten by the same
compare-and-set. The old blob's name is then recorded in the queue's ``blobs`` set, which the
workers' drain deletes (the exit duty's way); a rewrite refused leaves the old blob in use and
deletes the new one. A crash between the blob's write and the rewrite leaves an orphan blob only,
which the orphan sweep removes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model import codec
from ..model.errors import BlobNotFoundError, EncryptionError, MalformedMessageError
from ..offload import refs
from ..spine.calls import Call, Rewrapped
from ..spine.keys import PREFIX, queue_keys
from ..spine.stored import ACTIVE, message_of, state_char
from ..spine.twin import Steps
from .encryption import LOGS, PAYLOAD, RESULT, KeyRing, header, is_sealed, key_id, tenant_of_kid
from .signing import Refused, trust_gate

CURSOR = f"{PREFIX}:keys:rotate"
"""HASH: where a rotation is (``queue``, ``cursor``) and what it did so far (``rewritten``,
``skipped``, ``failed``)."""
PAGE = 200


@dataclass
class RotationReport:
    """What a rotation did: tasks ``rewritten``, ``skipped`` (active, changed while read: a
    later run takes them), ``failed`` (cannot be opened: a missing key, a tampered ciphertext, a
    bad signature: left as they are), tenant keys ``rewrapped``; ``done``: it went through
    every queue (else it stopped after ``max_pages`` pages: run it again to go on)."""

    rewritten: int = 0
    skipped: int = 0
    failed: int = 0
    rewrapped: int = 0
    done: bool = False


def _old(ring: KeyRing, v: Any) -> bool:
    """Is ``v`` sealed with a ring key other than the newest (tenant keys are rewrapped instead)?"""
    if not is_sealed(v):
        return False
    kid = key_id(v)
    return tenant_of_kid(kid) is None and kid != ring.newest


def _reseal(ring: KeyRing, v: Any, what: bytes, queue: str) -> Any:
    if not _old(ring, v):
        return v
    _, digest, _ = header(v)  # (a unique task's lock digest is kept: its lock key holds it)
    plain = ring.open_bytes(v, what, queue)
    return ring.seal_with(ring.newest, ring.keys[ring.newest], plain, what, digest=digest)


def rotated(ring: KeyRing, queue: str, msg: codec.Message) -> codec.Message | None:
    """``msg`` with its values sealed with old ring keys sealed again with the newest; None when
    it holds none."""
    p = msg.payload
    args = p.get("a") if type(p) is dict else None
    if not any(_old(ring, v) for v in (p, args, msg.result, msg.logs)):
        return None
    if _old(ring, args):
        p = {**p, "a": _reseal(ring, args, PAYLOAD, queue)}
    else:
        p = _reseal(ring, p, PAYLOAD, queue)
    return msg.with_(payload=p, result=_reseal(ring, msg.result, RESULT, queue),
                     logs=_reseal(ring, msg.logs, LOGS, queue))


def _value(reply: Any) -> Any:
    return reply


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _rewrap_tenant_keys(broker: Any, queue: str, report: RotationReport) -> Steps[None]:
    ring: KeyRing = broker.ring
    got = (yield [Call(_value, command=("HGETALL", queue_keys(queue).tkeys))])[0]
    if isinstance(got, BaseException):
        raise got
    calls = []
    for tenant_b, stored in (got or {}).items():
        tenant = _text(tenant_b)
        try:
            _, ext = codec.decode_value(stored)
            if not _old(ring, ext):
                continue
            kid, key = ring.unwrap(queue, tenant, stored)
        except (EncryptionError, MalformedMessageError, ValueError, TypeError):
            report.failed += 1
            continue
        calls.append(broker.rewrap(queue, tenant, stored, ring.wrap(queue, tenant, kid, key), tkeys=True))
    if calls:
        for r in (yield calls):
            report.rewrapped += 1 if r is Rewrapped.REWRITTEN else 0


def _opened(store: Any, msg: codec.Message) -> tuple[codec.Message, str | None]:
    """``msg`` with its offloaded payload read from ``store`` in place of its reference, and the
    blob's name (``msg`` itself and None when it is not offloaded, or there is no store)."""
    if store is None or not refs.is_ref(msg.payload):
        return msg, None
    name = refs.ref_of(msg.payload)
    return msg.with_(payload=refs.decode(store.get(name))), name


def _offloaded(store: Any, queue: str, id: str, read: codec.Message, opened: codec.Message,
               new: codec.Message, name: str | None) -> tuple[codec.Message, str | None]:
    """``new`` as it is stored: an offloaded payload sealed again written to a new blob and
    referred to (its name returned), one unchanged referred to as it was."""
    if name is None:
        return new, None
    if new.payload is opened.payload:
        return new.with_(payload=read.payload), None
    fresh = refs.blob_name(queue, id)
    store.put(fresh, refs.encode(new.payload))  # (a crash from here to the rewrite: an orphan, swept)
    return new.with_(payload=refs.make_ref(fresh)), fresh


class _Blobs:
    """The blob names of one page's rewrites, in call order: the old one (to delete when its
    rewrite is done) and the new one (to delete when it is refused; after an error, whichever is
    not referred to is left to the orphan sweep)."""

    def __init__(self) -> None:
        self.names: list[tuple[str | None, str | None]] = []

    def settle(self, store: Any, queue: str, replies: list[Any]) -> Steps[None]:
        done = [old for (old, new), r in zip(self.names, replies, strict=True)
                if new is not None and old is not None and r is Rewrapped.REWRITTEN]
        for (_, new), r in zip(self.names, replies, strict=True):
            if new is not None and isinstance(r, Rewrapped) and r is not Rewrapped.REWRITTEN:
                store.delete(new)  # refused, so never referred to (an error: left for the sweep)
        if done:
            yield [Call(_value, command=("SADD", queue_keys(queue).blobs, *done))]


def _page(broker: Any, queue: str, entries: dict[Any, bytes], report: RotationReport,
          store: Any = None) -> Steps[None]:
    """Rewrite one page of a queue's tasks (one round trip for the page's rewrites)."""
    calls = []
    blobs = _Blobs()
    for id_b, value in entries.items():
        id = id_b.decode(errors="surrogateescape") if isinstance(id_b, bytes) else id_b
        if state_char(value) == ACTIVE:
            body = message_of(value)
            try:
                if any(_old(broker.ring, v) for v in _sealed_values(codec.decode(body))):
                    report.skipped += 1
            except MalformedMessageError:
                pass
            continue
        gate = trust_gate(broker.signer, queue, id, message_of(value))
        if isinstance(gate, Refused):
            continue
        try:
            opened, name = _opened(store, gate.msg)
            new = rotated(broker.ring, queue, opened)
        except (EncryptionError, BlobNotFoundError, MalformedMessageError):
            report.failed += 1
            continue
        if new is not None:
            new, fresh = _offloaded(store, queue, id, gate.msg, opened, new, name)
            blobs.names.append((name, fresh))
            calls.append(broker.rewrap(queue, id, value, state_char(value) + gate.store(new)))
    if calls:
        replies = yield calls
        for r in replies:
            if r is Rewrapped.REWRITTEN:
                report.rewritten += 1
            else:
                report.skipped += 1
        yield from blobs.settle(store, queue, list(replies))


def _sealed_values(msg: codec.Message) -> list[Any]:
    p = msg.payload
    return [p, p.get("a") if type(p) is dict else None, msg.result, msg.logs]


def _queue(broker: Any, queue: str, cursor: str, report: RotationReport, pages: list[int],
           max_pages: int | None, page: int, store: Any = None) -> Steps[bool]:
    """Rotate one queue from ``cursor`` on; False when it stopped at ``max_pages`` (``pages``:
    the count so far, shared across queues)."""
    if cursor == "0":
        yield from _rewrap_tenant_keys(broker, queue, report)
    while True:
        got = (yield [Call(_value, command=("HSCAN", queue_keys(queue).tasks, cursor, "COUNT", page))])[0]
        if isinstance(got, BaseException):
            raise got
        cursor, entries = _text(got[0]), got[1]
        if isinstance(entries, list):  # (a flat list of field, value)
            entries = dict(zip(entries[0::2], entries[1::2]))
        yield from _page(broker, queue, entries, report, store)
        pages[0] += 1
        yield [Call(_value, command=("HSET", CURSOR, "queue", queue, "cursor", cursor))]
        if cursor == "0":
            return True
        if max_pages is not None and pages[0] >= max_pages:
            return False


def rotate_plan(broker: Any, queues: Sequence[str], restart: bool = False, max_pages: int | None = None,
                page: int = PAGE, store: Any = None) -> Steps[RotationReport]:
    """Re-encrypt ``queues`` (every known queue, sorted, as the caller gives them) with the
    broker's ring's newest key, from where the last run stopped (``restart``: from the start);
    offloaded payloads too when given their blob ``store`` (called in the caller's thread)."""
    report = RotationReport()
    cur = (yield [Call(_value, command=("HGETALL", CURSOR))])[0]
    if isinstance(cur, BaseException):
        raise cur
    saved = {_text(k): _text(v) for k, v in (cur or {}).items()} if not restart else {}
    order = sorted(queues)
    start_q, cursor = saved.get("queue", ""), saved.get("cursor", "0")
    if start_q not in order:
        start_q, cursor = (order[0] if order else ""), "0"
    pages = [0]
    for queue in order[order.index(start_q):] if start_q else []:
        finished = yield from _queue(broker, queue, cursor, report, pages, max_pages, page, store)
        if not finished:
            return report
        cursor = "0"
    yield [Call(_value, command=("DEL", CURSOR))]
    report.done = True
    return report


__all__ = ["CURSOR", "RotationReport", "rotate_plan", "rotated"]
