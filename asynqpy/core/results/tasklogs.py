"""Task logs (BullMQ's ``job.log``), sans I/O: the lines a handler wrote for an attempt, kept with
the task in its stored message (the ``logs`` field), so they live exactly as long as the task.

A handler writes a line with :meth:`asynqpy.Task.log`; a server with ``capture_logs`` also keeps
the handler's own :mod:`logging` records emitted while the task runs (``asynqpy.worker.logs``'s
capture handler finds the task through :func:`asynqpy.core.model.task.current_task`'s context variable,
so concurrent tasks in one event loop, and the threads they start with ``asyncio.to_thread``, keep
their lines apart). An attempt keeps at most :data:`MAX_LINES` lines and :data:`MAX_BYTES` bytes
of text (a line longer than :data:`MAX_LINE_BYTES` is cut; past either bound the lines are counted,
not kept, and one last line says how many). The lines are written with the attempt's end when it
stores the task again (kept after success: ``retention``; retried; archived): no command of its
own. A task's logs keep its newest attempts within :data:`MAX_TASK_BYTES`.

Stored as ``[[attempt, unix ms, text], ...]`` (``attempt``: 1 for the first run).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import msgpack

MAX_LINES = 100
"""Lines kept per attempt."""
MAX_BYTES = 16 * 1024
"""Bytes of text (UTF-8) kept per attempt."""
MAX_LINE_BYTES = 4096
"""A longer line is cut to this many bytes (with a note of how much was cut)."""
MAX_TASK_BYTES = 64 * 1024
"""Bytes of text a task keeps over all its attempts: the oldest attempts go first."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a task's logs: ``attempt`` (1 = the first run), ``at`` (aware UTC datetime),
    ``text``."""

    attempt: int
    at: datetime
    text: str


def text(value: object) -> str:
    """A line's text from whatever the handler passed (never an error): str as it is, bytes
    decoded (UTF-8, bad bytes replaced), anything else its ``str()``; characters UTF-8 cannot
    carry (lone surrogates) are replaced."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bytes, bytearray, memoryview)):
        text = bytes(value).decode("utf-8", "replace")
    else:
        try:
            text = str(value)
        except Exception as exc:  # noqa: BLE001 - a broken __str__ must not fail the handler
            text = f"<unprintable {type(value).__name__}: {type(exc).__name__}>"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def cut(line: str) -> tuple[str, int]:
    """(the line within MAX_LINE_BYTES, its size in bytes)."""
    data = line.encode("utf-8")
    if len(data) <= MAX_LINE_BYTES:
        return line, len(data)
    note = f" ... [{len(data) - MAX_LINE_BYTES} bytes cut]"
    kept = data[:MAX_LINE_BYTES - len(note)].decode("utf-8", "ignore") + note
    return kept, len(kept.encode("utf-8"))


class Buffer:
    """The lines of one attempt, bounded (thread-safe: a plain-``def`` handler's thread and the
    threads it starts write here too)."""

    __slots__ = ("attempt", "lines", "size", "dropped", "_lock")

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.lines: list[list[Any]] = []
        self.size = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def add(self, value: object, at_ms: int) -> None:
        """Keep a line (or count it, past the bounds)."""
        line, size = cut(text(value))
        with self._lock:
            if len(self.lines) >= MAX_LINES or self.size + size > MAX_BYTES:
                self.dropped += 1
                return
            self.lines.append([self.attempt, at_ms, line])
            self.size += size

    def entries(self, now_ms: int) -> list[list[Any]]:
        """The attempt's lines as stored, with a last line counting those not kept."""
        with self._lock:
            out = list(self.lines)
            if self.dropped:
                out.append([self.attempt, now_ms, f"[{self.dropped} more lines not kept: an attempt keeps "
                                                  f"{MAX_LINES} lines, {MAX_BYTES // 1024} KiB]"])
            return out


def merged(old: list[list[Any]] | None, new: list[list[Any]]) -> list[list[Any]]:
    """A task's stored logs with an attempt's lines added; the oldest attempts go (whole) while
    the text passes MAX_TASK_BYTES."""
    lines = (old or []) + new
    total = sum(len(e[2].encode("utf-8")) for e in lines)
    start = 0
    while total > MAX_TASK_BYTES and start < len(lines):
        attempt = lines[start][0]
        while start < len(lines) and lines[start][0] == attempt:
            total -= len(lines[start][2].encode("utf-8"))
            start += 1
    return lines[start:]


def valid(entries: list[Any]) -> bool:
    """Whether a stored ``logs`` field has the stored shape (the codec's check)."""
    return all(type(e) is list and len(e) == 3 and type(e[0]) is int and type(e[1]) is int and type(e[2]) is str
               for e in entries)


def lines(entries: list[list[Any]] | None) -> list[LogLine]:
    """The stored ``logs`` field as :class:`LogLine` values; encrypted lines (an extension object,
    docs/encryption.md) as one line holding them, which the reader with the key replaces."""
    if type(entries) is msgpack.ExtType:
        return [LogLine(0, datetime.fromtimestamp(0, tz=timezone.utc), entries)]  # type: ignore[arg-type]
    return [LogLine(a, datetime.fromtimestamp(ms / 1000, tz=timezone.utc), t) for a, ms, t in entries or ()]
