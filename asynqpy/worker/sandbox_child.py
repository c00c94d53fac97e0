"""The child process of a sandboxed-handler pool (``python -m asynqpy.worker.sandbox_child``): reads
run requests on fd 0, answers on fd 1 (see :mod:`asynqpy.core.sandbox`); what handlers print goes
to stderr (the protocol owns stdout)."""

from __future__ import annotations

import asyncio
import inspect
import os
import resource
import sys
import traceback
from datetime import datetime, timezone
from typing import Any, BinaryIO

from ..core import codec
from ..core.codec import Message
from ..core.errors import RateLimited, SkipRetry
from ..core.sandbox import HEADER, frame, resolve, unframe
from ..core.task import Task


def _read(inp: BinaryIO, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = inp.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


async def _awaited(aw: Any) -> Any:
    return await aw


MEASURE = os.environ.get("ASYNQPY_SANDBOX_MEASURE") == "1"  # the pool has a memory limit


def _rss_kb() -> int:
    """This process's peak resident memory in KB. On Linux, VmHWM (its own, since exec):
    ru_maxrss also counts the parent's memory at fork time, which a child inherits across exec,
    so a child of a big worker would look bloated from its first task."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def main() -> None:
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # print() and fd 1 writes go to stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdout = sys.stderr
    cache: dict[str, Any] = {}

    def send(items: list[Any]) -> None:
        out.write(frame(items))

    while True:
        try:
            (size,) = HEADER.unpack(_read(inp, HEADER.size))
            req = unframe(_read(inp, size))
        except EOFError:
            return
        _, path, t = req
        try:
            fn = cache.get(path)
            if fn is None:
                fn = cache[path] = resolve(path)
            msg = Message(type=t["type"], payload=t["payload"], max_retry=t["max_retry"], retried=t["retried"],
                          headers=t.get("headers") or None)
            deadline = datetime.fromtimestamp(t["deadline"] / 1000, timezone.utc) if t.get("deadline") else None
            task = Task(t["type"], _msg=msg, id=t["id"], queue=t["queue"], deadline=deadline)
            task._report = lambda data, value: send(["progress", data])
            returned = fn(task)
            if inspect.isawaitable(returned):
                returned = asyncio.run(_awaited(returned))
            result = task.result if task.has_result else returned
            send(["ok", None if result is None else codec.encode_payload(result, "result"),
                  _rss_kb() if MEASURE else 0])
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - every failure goes back to the worker
            kind = "skip" if isinstance(exc, SkipRetry) else "rate" if isinstance(exc, RateLimited) else "error"
            retry_in = float(getattr(exc, "retry_in", 0) or 0)
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            send(["err", kind, text, traceback.format_exc(), retry_in, _rss_kb() if MEASURE else 0])


if __name__ == "__main__":
    main()
