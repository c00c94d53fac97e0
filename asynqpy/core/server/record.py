"""The description of a live server (``asynqpy:server:<id>``, a msgpack map with a TTL), the one
place that knows its schema: the heartbeat writes it (:func:`pack`), the Inspector reads it
(:func:`unpack`).

Fields: ``id``, ``host``, ``pid``, ``queues`` (name -> weight), ``concurrency``, ``strict``,
``started`` (Unix seconds), ``name`` (the worker name targeted tasks use), ``active``: one
``[id, queue, type, started ms, deadline ms (0 = none)]`` per task the server runs, ``asynqpy`` (the
library's version the server runs) and ``protocol`` (the wire protocol it speaks). Ids written by
hand may be any bytes: strings are packed and read with ``surrogateescape``, as the broker reads
ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, cast

import msgpack

from ..model.task import ms_to_datetime
from ..spine.protocol import LIBRARY_VERSION, PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One task a server is running (as of its last heartbeat)."""

    task_id: str
    queue: str
    type: str
    started: datetime
    deadline: datetime | None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """A live server, from the description its heartbeat writes."""

    id: str
    host: str
    pid: int
    queues: dict[str, int]
    concurrency: int
    strict: bool
    started: datetime
    active: list[WorkerInfo]
    name: str = ""
    status: str = "running"  # running, quiet (takes no new task: asynqpy server quiet), stopping
    version: str = ""  # Server(version=): it runs tasks of min_worker_version up to it ('' = none)
    asynqpy_version: str = ""  # the asynqpy release it runs ('' = one older than the field)
    protocol: int = 0  # the wire protocol it speaks (0 = a release older than the field)


def pack(id: str, host: str, pid: int, queues: Mapping[str, int], concurrency: int, strict: bool,
         started: float, active: Iterable[tuple[str, str, str, int, int]], name: str = "",
         status: str = "running", version: str = "") -> bytes:
    """The record of a server; ``active``: (task id, queue, type, started ms, deadline ms)."""
    return cast(bytes, msgpack.packb({
        "id": id, "host": host, "pid": pid, "queues": dict(queues), "concurrency": concurrency,
        "strict": strict, "started": started, "active": [list(a) for a in active], "name": name,
        "status": status, "version": version, "asynqpy": LIBRARY_VERSION, "protocol": PROTOCOL_VERSION,
    }, unicode_errors="surrogateescape"))


def unpack(raw: bytes) -> ServerInfo:
    """A record read back; raises ValueError, KeyError, TypeError or msgpack's errors if it is
    not one."""
    d: Any = msgpack.unpackb(raw, raw=False, unicode_errors="surrogateescape")
    when = ms_to_datetime
    active = [WorkerInfo(str(a[0]), str(a[1]), str(a[2]), when(int(a[3])) or datetime.now(timezone.utc),
                         when(int(a[4]))) for a in d.get("active", [])]
    return ServerInfo(str(d["id"]), str(d["host"]), int(d["pid"]), {str(k): int(v) for k, v in d["queues"].items()},
                      int(d["concurrency"]), bool(d["strict"]),
                      datetime.fromtimestamp(float(d["started"]), tz=timezone.utc), active, str(d.get("name", "")),
                      str(d.get("status", "running")), str(d.get("version", "")), str(d.get("asynqpy", "")),
                      int(d.get("protocol", 0)))
