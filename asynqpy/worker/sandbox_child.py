"""The child process of a sandboxed-handler pool (``python -m asynqpy.worker.sandbox_child``): reads
run requests on fd 0, answers on fd 1 (see :mod:`asynqpy.core.handlers.sandbox`); what handlers print goes
to stderr (the protocol owns stdout).

The pool starts each child in a session of its own (``start_new_session``): what a handler starts
(a converter, a renderer) is in the child's process group, which the pool kills with the child. A
result over the worker's ``max_result_bytes`` fails here (``ResultError``) and is never sent; an
error's text and traceback are cut; so every frame stays under :func:`~asynqpy.core.handlers.sandbox.frame_limit`.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import resource
import sys
import threading
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, BinaryIO

from ..core.handlers.sandbox import ERROR_TEXT_CHARS, HEADER, TRACEBACK_CHARS, frame, resolve, unframe
from ..core.model import codec
from ..core.model.codec import Message
from ..core.model.errors import PayloadError, RateLimited, ResultError, SkipRetry
from ..core.model.task import MAX_RESULT_BYTES, Task, set_current
from ..core.results import tasklogs
from .logs import capture_start


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


def _encoded_result(result: Any, limit: int) -> bytes | None:
    """The result as msgpack bytes; ResultError for one that cannot be encoded or is over
    ``limit`` (the worker's max_result_bytes): it is refused here, never sent."""
    if result is None:
        return None
    try:
        data = codec.encode_payload(result, "result")
    except PayloadError as exc:
        raise ResultError(str(exc)) from None
    if len(data) > limit:
        raise ResultError(f"result is {len(data)} bytes, over the server's max_result_bytes ({limit})")
    return data


def _run(fn: Any, task: Task) -> bytes | None:
    """Run the handler; its encoded result (its locals, a big value among them, go with it)."""
    returned = fn(task)
    if inspect.isawaitable(returned):
        returned = asyncio.run(_awaited(returned))
    return _encoded_result(task.result if task.has_result else returned, task._max_result)


class _Forwarded(tasklogs.Buffer):
    """A sandboxed task's logs: each line goes to the worker as it is written (a ``log`` frame,
    cut to ``MAX_LINE_BYTES``: under the frame limit), whose buffer keeps the task's bounds."""

    __slots__ = ("send",)

    def __init__(self, attempt: int, send: Any) -> None:
        super().__init__(attempt)
        self.send = send

    def add(self, value: object, at_ms: int) -> None:
        text, _ = tasklogs.cut(tasklogs.text(value))
        self.send(["log", at_ms, text])


def _cut(text: str, chars: int, keep_end: bool = False) -> str:
    if len(text) <= chars:
        return text
    return "...\n" + text[-chars:] if keep_end else text[:chars] + "..."


def main() -> None:
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # print() and fd 1 writes go to stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdout = sys.stderr
    cache: dict[str, Any] = {}
    capturing = False

    sending = threading.Lock()  # (a handler's threads send log lines and progress too: whole frames)

    def send(items: list[Any]) -> None:
        data = frame(items)
        with sending:
            out.write(data)

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
            task = _task(t, send)
            if t.get("capture"):  # the handler's logging records too (the worker's capture_logs)
                task._capture = True
                if not capturing:
                    capture_start()
                    capturing = True
            set_current(task)  # current_task() in the handler; the capture's record -> task
            send(["ok", _run(fn, task), _rss_kb() if MEASURE else 0])
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - every failure goes back to the worker
            send(_failed(exc))


def _task(t: dict[str, Any], send: Callable[[list[Any]], None]) -> Task:
    """The task of a run request, its progress and log lines sent back to the worker."""
    msg = Message(type=t["type"], payload=t["payload"], max_retry=t["max_retry"], retried=t["retried"],
                  headers=t.get("headers") or None)
    deadline = datetime.fromtimestamp(t["deadline"] / 1000, timezone.utc) if t.get("deadline") else None
    task = Task(t["type"], _msg=msg, id=t["id"], queue=t["queue"], deadline=deadline)
    task._report = lambda data, value: send(["progress", data])
    task._max_result = int(t.get("max_result") or MAX_RESULT_BYTES)
    task._logs = _Forwarded(msg.retried + 1, send)
    return task


def _failed(exc: BaseException) -> list[Any]:
    """The answer for a handler that raised: its kind (skip, rate, result, error), its text and
    traceback (cut), the retry delay it asked for."""
    kind = ("skip" if isinstance(exc, SkipRetry) else "rate" if isinstance(exc, RateLimited)
            else "result" if isinstance(exc, ResultError) else "error")
    retry_in = float(getattr(exc, "retry_in", 0) or 0)
    text = str(exc) if kind == "result" else f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return ["err", kind, _cut(text, ERROR_TEXT_CHARS), _cut(traceback.format_exc(), TRACEBACK_CHARS, True),
            retry_in, _rss_kb() if MEASURE else 0]

if __name__ == "__main__":
    main()
