"""The pool of child processes sandboxed handlers run in (docs/workers.md "Sandboxed handlers").

Each child is ``python -m asynqpy.worker.sandbox_child``, started with asyncio's subprocess
support (no fork of the worker, no pickle: frames of msgpack over its stdin and stdout, see
:mod:`asynqpy.core.handlers.sandbox`). A task takes an idle child, sends its fields, forwards its progress
reports and the lines of its logs, and reads its outcome. A timeout or an operator's cancel
cancels the waiting coroutine: the child is killed at once (SIGKILL), so the run stops for real
and writes nothing afterwards. A child that dies fails only its task (``SandboxCrashError``,
"handler process died: SIGSEGV"). A killed, dead, worn (``max_tasks``) or bloated
(``max_memory_mb``) child is replaced.

Each child is the leader of a session (and process group) of its own: a kill (timeout, cancel,
shutdown, replacement, close) is a SIGKILL to the whole group, so what its handler started (a
converter, ``sleep 300``) dies with it; and a Ctrl-C at the worker's terminal does not reach the
children (the worker's graceful shutdown decides what happens to their runs). A frame's length is
checked against :func:`~asynqpy.core.handlers.sandbox.frame_limit` (``max_result_bytes`` plus a little)
before its body is read: a larger one fails the task (``SandboxFrameError``) and replaces the
child, so a child cannot make the worker buffer a huge answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

import msgpack

from ..core.handlers.sandbox import (
    FRAME_SLACK,
    HEADER,
    READ_LIMIT,
    SandboxCrashError,
    SandboxedError,
    SandboxFrameError,
    frame,
    frame_limit,
    unframe,
)
from ..core.model.errors import RateLimited, ResultError, SkipRetry
from ..core.model.task import MAX_RESULT_BYTES, Task

log = logging.getLogger("asynqpy.sandbox")


@dataclass(eq=False)
class _Child:
    proc: asyncio.subprocess.Process
    done: int = 0


def _kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a child's process group (the child leads it: start_new_session), then the child
    itself (in case the group is gone): what its handler started dies with it. Also for a child
    that already exited: its handler's processes may still run in its group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def _signal_name(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _relayed(got: list[Any], task: Task) -> bool:
    """A frame the child sends while the handler runs, passed on: a progress report, a line of
    the task's logs (task.log, a captured record); False for the answer."""
    if got[0] == "progress":
        if task._report is not None:
            task._report(got[1], msgpack.unpackb(got[1], raw=False, strict_map_key=False))
        return True
    if got[0] == "log":
        task.log_at(got[2], int(got[1]))
        return True
    return False


def _answer(got: list[Any]) -> Any:
    """The handler's return value from the child's answer, or what it raised."""
    if got[0] == "ok":
        return None if got[1] is None else msgpack.unpackb(got[1], raw=False, strict_map_key=False)
    _, kind, text, tb, retry_in = got[:5]
    if kind == "skip":
        raise SkipRetry(text)
    if kind == "rate":
        raise RateLimited(float(retry_in), text)
    if kind == "result":
        raise ResultError(text)
    raise SandboxedError(text, tb)


class SandboxPool:
    """``size`` child processes; ``max_tasks`` per child before it is replaced (0 = no limit);
    ``max_memory_mb``: a child whose peak RSS passed it after a task is replaced (0 = no limit);
    ``max_result_bytes``: the server's, applied in the child (a larger result fails there with
    ``ResultError``), and bounding the frames read from a child (:func:`frame_limit`)."""

    def __init__(self, size: int = 2, max_tasks: int = 0, max_memory_mb: int = 0,
                 max_result_bytes: int = MAX_RESULT_BYTES) -> None:
        self.size = size
        self.max_tasks = max_tasks
        self.max_kb = max_memory_mb * 1024
        self.max_result = max_result_bytes
        self.frame_limit = frame_limit(max_result_bytes)
        self._idle: asyncio.Queue[_Child] = asyncio.Queue()
        self._all: set[_Child] = set()
        self._closed = False
        self._started = False
        self._replacing: set[asyncio.Task[None]] = set()
        self.replaced = 0  # children replaced (killed, died, recycled): for tests and logs

    async def _spawn(self) -> _Child:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
        env["ASYNQPY_SANDBOX_MEASURE"] = "1" if self.max_kb else "0"  # a child reads its memory only if needed
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "asynqpy.worker.sandbox_child", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=None, env=env, limit=READ_LIMIT, start_new_session=True)
        child = _Child(proc)
        self._all.add(child)
        return child

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        for _ in range(self.size):
            self._idle.put_nowait(await self._spawn())

    async def _replace(self, child: _Child, why: str) -> None:
        self._all.discard(child)
        _kill(child.proc)
        try:
            await asyncio.wait_for(child.proc.wait(), 5)
        except asyncio.TimeoutError:
            log.error("sandbox child %s did not exit after SIGKILL", child.proc.pid)
        self.replaced += 1
        log.debug("sandbox child %s replaced: %s", child.proc.pid, why)
        if not self._closed:
            self._idle.put_nowait(await self._spawn())

    async def run(self, path: str, task: Task, deadline_ms: int) -> Any:
        """Run the handler at ``path`` on ``task`` in a child; its return value (or written
        result). Raises what the handler raised (SkipRetry, RateLimited, else SandboxedError),
        or SandboxCrashError."""
        await self.start()
        child = await self._idle.get()
        healthy = False
        why = "killed: the run was cancelled (timeout, cancel or shutdown)"
        try:
            assert child.proc.stdin is not None and child.proc.stdout is not None
            msg = task.message
            child.proc.stdin.write(frame(["run", path, {
                "type": msg.type, "payload": msg.payload, "id": task.id, "queue": task.queue,
                "retried": msg.retried, "max_retry": msg.max_retry, "headers": msg.headers, "deadline": deadline_ms,
                "max_result": self.max_result, "capture": task._capture}]))
            await child.proc.stdin.drain()
            while True:
                (size,) = HEADER.unpack(await child.proc.stdout.readexactly(HEADER.size))
                if size > self.frame_limit:  # refused unread: the child is killed and replaced below
                    why = f"killed: it sent a {size}-byte frame"
                    raise SandboxFrameError(
                        f"handler process sent a {size}-byte answer, over the {self.frame_limit}-byte limit "
                        f"(max_result_bytes {self.max_result} + {FRAME_SLACK}); it was killed and replaced")
                got = unframe(await child.proc.stdout.readexactly(size))
                if not _relayed(got, task):
                    break
            child.done += 1
            recycled = self._worn(child, int(got[-1] or 0))
            healthy, why = recycled is None, recycled or why
            return _answer(got)
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
            code = await child.proc.wait()
            why = f"died ({_signal_name(code)})"
            raise SandboxCrashError(f"handler process died: {_signal_name(code)}") from exc
        finally:
            if healthy:
                self._idle.put_nowait(child)
            else:
                # replaced in the background: a cancelled run returns at once (the kill is sent first)
                _kill(child.proc)
                t = asyncio.get_running_loop().create_task(self._replace(child, why))
                self._replacing.add(t)
                t.add_done_callback(self._replacing.discard)

    def _worn(self, child: _Child, rss: int) -> str | None:
        """Why a child that answered is to be replaced (``max_tasks`` run, or over ``max_memory_mb``)."""
        if self.max_tasks and child.done >= self.max_tasks:
            return f"recycled after {child.done} task(s)"
        if self.max_kb and rss > self.max_kb:
            return f"recycled: {rss // 1024} MB over max_memory_mb"
        return None

    async def close(self) -> None:
        """Stop every child (killed: whatever still runs in one was requeued or written)."""
        self._closed = True
        for t in list(self._replacing):
            await asyncio.gather(t, return_exceptions=True)
        for child in list(self._all):
            _kill(child.proc)
        for child in list(self._all):
            try:
                await asyncio.wait_for(child.proc.wait(), 5)
            except asyncio.TimeoutError:
                pass
        self._all.clear()
