"""Sandboxed handlers, sans I/O (docs/workers.md "Sandboxed handlers"): the marker a handler
registered with ``sandbox=True`` gets in the mux, the import path a child process finds it by,
and the frames the worker and its children exchange (msgpack, never pickle).

Frames (each a 4-byte big-endian length and a msgpack array):
- worker -> child: ``["run", path, task]``, ``task`` a map of the task's fields;
- child -> worker: ``["progress", value (msgpack bytes)]`` any number of times, then
  ``["ok", result (msgpack bytes, or nil), rss_kb]`` or ``["err", kind, text, traceback,
  retry_in, rss_kb]`` (kind: ``error``, ``skip`` (SkipRetry), ``rate`` (RateLimited) or
  ``result`` (ResultError: a result over ``max_result_bytes``, refused in the child, never sent)).

A frame's size is bounded before its body is read (:func:`frame_limit`): the child applies
``max_result_bytes`` to a result and cuts an error's text and traceback, so its frames stay under
the limit; the worker reads a frame's 4-byte length first and refuses a larger one
(:class:`SandboxFrameError`) without reading its body, so a child cannot make the worker buffer
more than about ``max_result_bytes``.
"""

from __future__ import annotations

import importlib
import inspect
import struct
from typing import Any

import msgpack

from ..model.errors import AsynqpyError, InvalidArgumentError
from ..model.task import MAX_PROGRESS_BYTES

HEADER = struct.Struct(">I")
READ_LIMIT = 256 << 10
"""Bytes the worker's pipe reader buffers before it stops reading from a child (flow control)."""
ERROR_TEXT_CHARS = 4096
"""Characters of a sandboxed handler's error text the child sends (the worker keeps fewer)."""
TRACEBACK_CHARS = 8192
"""Characters of a child's traceback it sends (its end: the innermost frames)."""
FRAME_SLACK = 64 << 10
"""Bytes a frame may hold beyond its result or progress value: its other fields, an error's text
and traceback (at most 4 bytes per character of the two cuts above)."""


def frame_limit(max_result_bytes: int) -> int:
    """The largest frame a child may send to a worker whose ``max_result_bytes`` is this."""
    return max(max_result_bytes, MAX_PROGRESS_BYTES) + FRAME_SLACK


class SandboxCrashError(AsynqpyError):
    """The child process running a sandboxed handler died (a segfault, the OOM killer, os._exit):
    the task fails with this (and is retried); the pool replaces the child."""


class SandboxFrameError(SandboxCrashError):
    """A child announced a frame over :func:`frame_limit` (a handler writing to the protocol's
    pipe, a broken child): the worker fails the task with this without reading the frame, and
    replaces the child (and kills its process group)."""


class SandboxedError(AsynqpyError):
    """What a sandboxed handler raised, carried back from its child process: ``str()`` is
    ``"<type>: <message>"`` and ``remote_traceback`` the child's traceback."""

    def __init__(self, text: str, remote_traceback: str = "") -> None:
        super().__init__(text)
        self.remote_traceback = remote_traceback


def import_path(fn: Any) -> str:
    """``module:qualname`` of a function a child process can import; InvalidArgumentError for a
    lambda, a nested function or a callable object that is not a module-level function."""
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not inspect.isfunction(fn) or not mod or not qual or "<" in qual or mod == "__main__":
        what = "a lambda" if getattr(fn, "__name__", "") == "<lambda>" else repr(fn)
        raise InvalidArgumentError(f"a sandboxed handler runs in a child process, which imports it by its module "
                                   f"and name: it must be a module-level function of an importable module "
                                   f"(not {what}{' in __main__' if mod == '__main__' else ''})")
    return f"{mod}:{qual}"


def resolve(path: str) -> Any:
    """The function at ``module:qualname`` (in the child)."""
    mod, _, qual = path.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return getattr(obj, "__sandbox_call__", obj)  # a typed task function binds the payload to its arguments


class Sandboxed:
    """A handler registered with ``sandbox=True``: run in a child process of the server's pool."""

    def __init__(self, fn: Any, local: Any = None) -> None:
        self.fn = local or fn
        self.path = import_path(fn)
        self.is_async = inspect.iscoroutinefunction(self.fn)

    async def __call__(self, task: Any) -> Any:  # only when run outside a server (tests calling it)
        return await self.fn(task) if self.is_async else self.fn(task)

    def __repr__(self) -> str:
        return f"<sandboxed {self.path}>"


def frame(items: list[Any]) -> bytes:
    body: bytes = msgpack.packb(items, use_bin_type=True)
    return HEADER.pack(len(body)) + body


def unframe(body: bytes) -> list[Any]:
    got = msgpack.unpackb(body, raw=False, strict_map_key=False)
    if not isinstance(got, list) or not got:
        raise ValueError("not a frame")
    return got
