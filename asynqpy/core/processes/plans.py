"""Plans of the process operations (sans I/O; run by the Client and Inspector facades, sync or
async): reading a process, listing a queue's processes. See :mod:`asynqpy.core.processes.model`."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..deploy.versions import encode_version
from ..inspector.inspection import MAX_OFFSET, Plan
from ..model.codec import decode
from ..model.errors import InvalidArgumentError, MalformedMessageError
from ..model.task import TaskState
from ..spine.broker import Acted, Broker, Call
from ..spine.keys import queue_keys
from ..spine.stored import lock_digest, message_of
from .model import (
    ERROR,
    RUNNING,
    STARTING,
    Process,
    ProcessNotFoundError,
    key_of,
    parse_read,
    parse_record,
    validate_id,
)

STATUSES = (STARTING, RUNNING, ERROR)

MAX_PAGE = 1000


def input_options(found: Process, options: dict[str, Any]) -> dict[str, Any]:
    """The options of an input sent to process ``found``: its tenant and version gate, the ones
    it was started with (a ``tenant=`` or ``min_worker_version=`` naming others is refused)."""
    given, version, have = options.get("tenant"), options.get("min_worker_version"), found.min_worker_version
    if given is not None and given != found.tenant:
        raise InvalidArgumentError(f"process {found.id!r} belongs to tenant {found.tenant!r}, not {given!r}: its "
                                   "inputs take the tenant it was started with")
    if version is not None and encode_version(version) != (encode_version(have) if have else 0):
        raise InvalidArgumentError(f"process {found.id!r} takes workers of version {have or 'any'}, not "
                                   f"{version!r}: its inputs take the version gate it was started with")
    return {**options, "tenant": found.tenant or None, "min_worker_version": have or None}


def read(b: Broker, queue: str, pid: str, first: int = 0, count: int = 20,
         with_failing: bool = False) -> Plan[Process]:
    """Process ``pid`` with ``count`` events of its history from event ``first`` (1-based; 0:
    the latest ``count``); ``with_failing``: and its ``failing`` input (see :func:`failing`: the
    Inspector's view). Raises ProcessNotFoundError."""
    validate_id(pid)
    for name, v in (("first", first), ("count", count)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_OFFSET:
            raise InvalidArgumentError(f"{name} must be an int from 0 to {MAX_OFFSET}, got {v!r}")
    if count > MAX_PAGE:
        raise InvalidArgumentError(f"count must be at most {MAX_PAGE}, got {count}")
    res = yield [b.proc_read(queue, pid, first, count)]
    got = _ok(res[0])
    proc = parse_read(pid, got, queue)
    if proc is None:
        raise ProcessNotFoundError(f"no process {pid!r} in queue {queue!r}")
    return (yield from failing(queue, [proc]))[0] if with_failing else proc


def failing(queue: str, procs: list[Process]) -> Plan[list[Process]]:
    """``procs`` with ``failing`` filled in where the input holding the process's turn (its key's
    holder) waits for a retry: two reads for a page (the holders, then their tasks), only for the
    Inspector (a processor's read does not pay for it)."""
    if not procs:
        return procs
    q = queue_keys(queue)
    holders = _ok((yield [Call(lambda r: r, command=("HMGET", q.keyheld, *[key_of(p.id) for p in procs]))])[0])
    held = [(i, h) for i, h in enumerate(holders) if isinstance(h, bytes)]
    if not held:
        return procs
    values = _ok((yield [Call(lambda r: r, command=("HMGET", q.tasks, *[h for _, h in held]))])[0])
    out = list(procs)
    for (i, h), v in zip(held, values):
        if not isinstance(v, bytes) or v[:1] != b"r":
            continue
        try:
            msg = decode(message_of(v))
        except MalformedMessageError:
            continue
        out[i] = dataclasses.replace(out[i], failing=msg.last_error or "failed", failing_input=h.decode(
            errors="surrogateescape"), failing_attempts=msg.retried)
    return out


def listing(b: Broker, queue: str, start: int = 0, count: int = 100,
            status: str | None = None) -> Plan[tuple[int, list[Process]]]:
    """(how many processes ``queue`` has, a page of them by last change, newest first, without
    their history). ``status`` (starting, running, error): only those, and how many there are;
    that reads every record of the queue (HSCAN, a thousand at a time: O(processes))."""
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= MAX_OFFSET:
        raise InvalidArgumentError(f"start must be an int from 0 to {MAX_OFFSET}, got {start!r}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PAGE:
        raise InvalidArgumentError(f"count must be an int from 1 to {MAX_PAGE}, got {count!r}")
    if status is not None:
        if status not in STATUSES:
            raise InvalidArgumentError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        found = yield from _scan(queue, status)
        found.sort(key=lambda p: (p.updated is not None, p.updated), reverse=True)
        return len(found), (yield from failing(queue, found[start:start + count]))
    res = yield [b.procs_count(queue), b.procs(queue, start, start + count - 1)]
    total, ids = _ok(res[0]), _ok(res[1])
    if not ids:
        return total, []
    reads = _ok((yield [b.proc_read_many(queue, [pid for pid, _ in ids], 0, 0)])[0])
    out = []
    for (pid, _), r in zip(ids, reads):
        proc = parse_read(pid, _ok(r), queue)
        if proc is not None:  # removed meanwhile
            out.append(proc)
    return total, (yield from failing(queue, out))


def _scan(queue: str, status: str) -> Plan[list[Process]]:
    """Every process of ``queue`` in ``status`` (one HSCAN pass over the records)."""
    key = queue_keys(queue).proc
    cursor, out = "0", []
    while True:
        page = _ok((yield [Call(lambda r: r, command=("HSCAN", key, cursor, "COUNT", 1000))])[0])
        flat = page[1]
        pairs = list(flat.items()) if isinstance(flat, dict) else list(zip(flat[::2], flat[1::2]))
        for pid, raw in pairs:
            rec = parse_record(pid.decode(errors="surrogateescape"), raw)
            if rec.status == status:
                out.append(rec.view((), queue))
        cursor = page[0].decode() if isinstance(page[0], bytes) else str(page[0])
        if cursor == "0":
            return out


def _ok(v: Any) -> Any:
    if isinstance(v, Exception):
        raise v
    return v


def drop_failing(b: Broker, queue: str, pid: str) -> Plan[str]:
    """``remove_process(now=True)``'s first step: if the input holding process ``pid``'s turn
    waits for a retry (an init that keeps failing, say), delete it (``delete_tasks``, which hands
    the key to the next input: lua/includes/exit.lua), so a removal sent next does not wait
    behind its retries. Returns the id deleted, or ''. An input that is running, or pending, is
    left alone (the removal waits for it)."""
    q = queue_keys(queue)
    holder = _ok((yield [Call(lambda r: r, command=("HGET", q.keyheld, key_of(pid)))])[0])
    if not isinstance(holder, bytes):
        return ""
    id = holder.decode(errors="surrogateescape")
    stored = _ok((yield [b.get_task(queue, id)])[0])
    if not isinstance(stored, bytes) or stored[:1] != b"r":
        return ""
    codes = _ok((yield [b.delete_tasks(queue, TaskState.RETRY, [(id, lock_digest(stored), -1, stored)], 0)])[0])
    return id if codes == [Acted.OK] else ""
