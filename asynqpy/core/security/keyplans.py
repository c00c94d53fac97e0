"""Encryption's I/O, as plans (sans-I/O): the tenant keys a :class:`~.encryption.KeyRing` loads
from Redis, the reading side's decryption of what the Inspector and the clients return
(:func:`reveal_plan`), and forgetting a tenant (:func:`forget_plan`). docs/encryption.md.

A tenant key lives in the queue's HASH ``asynqpy:{Q}:tkeys`` (tenant -> its key id and key, the key
sealed with the ring's newest key). It is made by the first writer that needs it (``HSETNX``: two
writers racing keep the first one's) and read by every reader that meets its id. Plain commands,
no script: the key schema's other keys are untouched.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from ..model.codec import decode
from ..model.errors import EncryptionError, MalformedMessageError, TaskNotFoundError, TaskStateError
from ..model.task import TaskInfo
from ..processes.model import Process
from ..results import tasklogs
from ..spine.calls import Call
from ..spine.keys import queue_keys
from ..spine.stored import is_active, message_of
from ..spine.twin import Steps
from .encryption import (
    HISTORY,
    LOGS,
    PAYLOAD,
    RESULT,
    STATE,
    Encrypted,
    KeyRing,
    is_sealed,
    key_id,
    tenant_kid,
    tenant_of_kid,
)


def _value(reply: Any) -> Any:
    return reply


def load_plan(ring: KeyRing, pairs: Iterable[tuple[str, str]], create: bool = False) -> Steps[None]:
    """Load the keys of (queue, tenant) ``pairs`` the ring has not loaded yet (one round trip);
    with ``create``, make the ones missing (the writer's side). A forgotten tenant's key stays
    missing for a reader: opening its values raises KeyNotFoundError."""
    missing = sorted({p for p in pairs if p[1] and not (ring.known(*p) and (ring.tenant_key(*p) or not create))})
    if not missing:
        return
    calls: list[Call[Any]] = []
    if create:
        for q, t in missing:
            dek_id, key = ring.new_tenant_key()
            calls.append(Call(_value, command=("HSETNX", queue_keys(q).tkeys, t,
                                                ring.wrap(q, t, tenant_kid(dek_id, t), key))))
    calls += [Call(_value, command=("HGET", queue_keys(q).tkeys, t)) for q, t in missing]
    replies = yield calls
    for (q, t), stored in zip(missing, replies[len(replies) - len(missing):]):
        if isinstance(stored, BaseException):
            raise stored
        if stored:
            kid, key = ring.unwrap(q, t, stored)
            ring.remember(q, t, kid, key)
        else:  # forgotten (or never made): what this process held of it goes too
            ring.remember_none(q, t)


def _sealed_in(info: TaskInfo) -> Iterable[Any]:
    yield info.payload
    yield info.result
    yield from info.run_results.values()
    if len(info.logs) == 1 and is_sealed(info.logs[0].text):
        yield info.logs[0].text


def _needed(value: Any, queue: str) -> set[tuple[str, str]]:
    """The (queue, tenant) keys the sealed values of ``value`` are sealed with."""
    out: set[tuple[str, str]] = set()
    for q, v in _values(value, queue):
        if is_sealed(v):
            tenant = tenant_of_kid(key_id(v))
            if tenant is not None:
                out.add((q, tenant))
    return out


def _values(value: Any, queue: str) -> Iterable[tuple[str, Any]]:
    if isinstance(value, Process):
        yield value.queue, value.state
        for e in value.history:
            yield value.queue, e.data
    elif isinstance(value, TaskInfo):
        for v in _sealed_in(value):
            yield value.queue, v
    elif isinstance(value, (list, tuple)) or type(value).__name__ == "TaskInfoList":
        for item in value:
            if isinstance(item, TaskInfo):
                yield from _values(item, queue)
    else:
        yield queue, value


def _open(ring: KeyRing | None, v: Any, what: bytes, queue: str, strict: bool) -> Any:
    if not is_sealed(v):
        return v
    if ring is None:
        if strict:
            raise EncryptionError(f"the {'result' if what == RESULT else 'value'} is encrypted: give the key ring "
                                  "(encryption=KeyRing(...), --encryption-keys)")
        return Encrypted(v, key_id(v))
    try:
        return ring.open(v, what, queue)
    except (EncryptionError, MalformedMessageError) as exc:
        if strict:
            raise
        return Encrypted(v, key_id(v), str(exc))


def _info(ring: KeyRing | None, info: TaskInfo) -> TaskInfo:
    q = info.queue
    changes: dict[str, Any] = {}
    if is_sealed(info.payload):
        changes["payload"] = _open(ring, info.payload, PAYLOAD, q, False)
    if is_sealed(info.result):
        changes["result"] = _open(ring, info.result, RESULT, q, False)
    if any(is_sealed(v) for v in info.run_results.values()):
        changes["run_results"] = {w: _open(ring, v, RESULT, q, False) for w, v in info.run_results.items()}
    if len(info.logs) == 1 and is_sealed(info.logs[0].text):  # the lines, sealed (tasklogs.lines)
        opened = _open(ring, info.logs[0].text, LOGS, q, False)
        if isinstance(opened, Encrypted):  # (shown so: its text says "encrypted")
            changes["logs"] = [replace(info.logs[0], text=opened)]  # type: ignore[arg-type]
        else:
            changes["logs"] = tasklogs.lines(opened)
    return replace(info, **changes) if changes else info


def reveal(ring: KeyRing | None, value: Any, queue: str = "", strict: bool = False) -> Any:
    """``value`` (a TaskInfo, a list of them, or a bare result) with its sealed values decrypted,
    or, those that cannot be (no ring, no key: ``strict`` False), shown as :class:`Encrypted`; the
    tenant keys must be loaded (:func:`reveal_plan` does)."""
    if isinstance(value, TaskInfo):
        return _info(ring, value)
    if isinstance(value, list) and any(isinstance(v, TaskInfo) for v in value):
        return [_info(ring, v) if isinstance(v, TaskInfo) else v for v in value]
    if type(value) is msgpack.ExtType:
        return _open(ring, value, RESULT, queue, strict)
    if isinstance(value, Process):
        return _process(ring, value)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], list) \
            and any(isinstance(p, Process) for p in value[1]):  # (Inspector.processes: total, page)
        return value[0], [_process(ring, p) for p in value[1]]
    return value


def _process(ring: KeyRing | None, p: Process) -> Process:
    """A process with its encrypted state and history opened (or shown as Encrypted)."""
    if not is_sealed(p.state) and not any(is_sealed(e.data) for e in p.history):
        return p
    return replace(p, state=_open(ring, p.state, STATE, p.queue, False),
                   history=[replace(e, data=_open(ring, e.data, HISTORY, p.queue, False)) for e in p.history])


def reveal_plan(ring: KeyRing | None, value: Any, queue: str = "", strict: bool = False) -> Steps[Any]:
    """:func:`reveal` after loading the tenant keys it needs (a round trip only when one is
    missing). Cheap for an answer holding nothing sealed."""
    if ring is not None:
        needed = _needed(value, queue)
        if needed:
            yield from load_plan(ring, needed)
    return reveal(ring, value, queue, strict)


def forget_plan(ring: KeyRing | None, queue: str, tenant: str, now_ms: int) -> Steps[bool]:
    """Destroy ``tenant``'s key in ``queue`` (True if it had one) and write the audit event
    ``tenant_forgotten`` to the queue's event stream. What was sealed with it can no longer be
    read by anyone."""
    q = queue_keys(queue)
    replies = yield [Call(_value, command=("HDEL", q.tkeys, tenant)),
                     Call(_value, command=("XADD", q.events, "*", "e", "tenant_forgotten", "id", "", "type", "",
                                           "tenant", tenant, "at", str(now_ms)))]
    for r in replies:
        if isinstance(r, BaseException):
            raise r
    if ring is not None:
        ring.forget(queue, tenant)
    return bool(replies[0])


def reveal_logs_plan(ring: KeyRing | None, lines: list[tasklogs.LogLine], queue: str) -> Steps[list[tasklogs.LogLine]]:
    """A task's log lines (``Inspector.task_logs``), decrypted when they are sealed."""
    if len(lines) != 1 or not is_sealed(lines[0].text):
        return lines
    info = TaskInfo("", queue, "", None, None, 0, 0, "", None, None, None, None, None, None, 0.0,  # type: ignore[arg-type]
                    logs=lines)
    return (yield from reveal_plan(ring, info)).logs  # type: ignore[no-any-return]


@dataclass
class ForgetReport:
    """What ``tenant forget`` did: ``key`` (the tenant had a key, now destroyed), its tasks
    ``removed`` (every state but active), ``left`` (active ones, or that changed meanwhile:
    unreadable now; a worker archives them when it meets them, and forgetting again removes them)."""

    key: bool = False
    removed: int = 0
    left: int = 0


def sweep_plan(plans: Any, queue: str, tenant: str, report: ForgetReport, page: int = 200) -> Steps[None]:
    """Delete ``tenant``'s tasks in ``queue`` that are not active (``plans``: the Inspector's
    :class:`~asynqpy.core.inspector.inspection.Plans`), walking the tasks hash a page at a time."""
    cursor = "0"
    while True:
        got = (yield [Call(_value, command=("HSCAN", queue_keys(queue).tasks, cursor, "COUNT", page))])[0]
        if isinstance(got, BaseException):
            raise got
        cursor = got[0].decode() if isinstance(got[0], bytes) else str(got[0])
        entries = got[1] if isinstance(got[1], dict) else dict(zip(got[1][0::2], got[1][1::2]))
        for id_b, value in entries.items():
            try:
                msg = decode(message_of(value))
            except MalformedMessageError:
                continue
            if msg.tenant != tenant:
                continue
            id = id_b.decode(errors="surrogateescape") if isinstance(id_b, bytes) else id_b
            if is_active(value):
                report.left += 1
                continue
            try:
                yield from plans.act("delete", queue, id)
                report.removed += 1
            except (TaskNotFoundError, TaskStateError):
                report.left += 1
        if cursor == "0":
            return
