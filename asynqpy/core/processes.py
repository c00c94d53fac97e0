"""Plans of the process operations (sans I/O; run by the Client and Inspector facades, sync or
async): reading a process, listing a queue's processes. See :mod:`asynqpy.core.process`."""

from __future__ import annotations

from typing import Any

from .broker import Broker
from .errors import InvalidArgumentError
from .inspection import Plan
from .process import Process, ProcessNotFoundError, parse_read, validate_id

MAX_PAGE = 1000


def read(b: Broker, queue: str, pid: str, first: int = 0, count: int = 20) -> Plan[Process]:
    """Process ``pid`` with ``count`` events of its history from event ``first`` (1-based; 0:
    the latest ``count``). Raises ProcessNotFoundError."""
    validate_id(pid)
    for name, v in (("first", first), ("count", count)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidArgumentError(f"{name} must be an int >= 0, got {v!r}")
    if count > MAX_PAGE:
        raise InvalidArgumentError(f"count must be at most {MAX_PAGE}, got {count}")
    res = yield [b.proc_read(queue, pid, first, count)]
    got = _ok(res[0])
    proc = parse_read(pid, got, queue)
    if proc is None:
        raise ProcessNotFoundError(f"no process {pid!r} in queue {queue!r}")
    return proc


def listing(b: Broker, queue: str, start: int = 0, count: int = 100) -> Plan[tuple[int, list[Process]]]:
    """(how many processes ``queue`` has, a page of them by last change, newest first, without
    their history)."""
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise InvalidArgumentError(f"start must be an int >= 0, got {start!r}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PAGE:
        raise InvalidArgumentError(f"count must be an int from 1 to {MAX_PAGE}, got {count!r}")
    res = yield [b.procs_count(queue), b.procs(queue, start, start + count - 1)]
    total, ids = _ok(res[0]), _ok(res[1])
    if not ids:
        return total, []
    reads = yield [b.proc_read(queue, pid, 0, 0) for pid, _ in ids]
    out = []
    for (pid, _), r in zip(ids, reads):
        proc = parse_read(pid, _ok(r), queue)
        if proc is not None:  # removed meanwhile
            out.append(proc)
    return total, out


def _ok(v: Any) -> Any:
    if isinstance(v, Exception):
        raise v
    return v
