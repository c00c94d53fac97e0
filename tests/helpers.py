"""Helpers for tests that run servers: run one in-process, wait on conditions with timeouts."""

from __future__ import annotations

import ast
import asyncio
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from asynqpy import ServeMux, Server

ROOT = Path(__file__).resolve().parent.parent

DEEP = os.environ.get("ASYNQPY_DEEP") == "1"
"""The deep run (``ASYNQPY_DEEP=1 bash scripts/test``: nightly, before a release, after an edit of a
model or a storm): the property tests and state machines draw their full examples and the fault
storms run their full sizes, as the full suite did before issue 43's budget. Unset (CI, a
developer's full run), each runs the share chosen to fit CI's 6 minutes on a 2-core machine with
the same rules and the same assertions (docs/internals-testing.md, "CI's time budget")."""


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once per test process: the guard tests (layers, reply
    codes, script names, exit paths) each walk every module of the package; read-only."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def walked(path: Path) -> tuple[ast.AST, ...]:
    """Every node of :func:`parsed`'s tree, in ``ast.walk``'s order, listed once per process."""
    return tuple(ast.walk(parsed(path)))


def sized(ci: int, deep: int) -> int:
    """``deep`` in the deep run (:data:`DEEP`), else ``ci``: examples of a property test, tasks of a
    storm (the CI share of the same test, not another test)."""
    return deep if DEEP else ci


@asynccontextmanager
async def serving(redis: Any, mux: ServeMux, **options: Any) -> AsyncIterator[Server]:
    """Run a Server in this event loop for the body of the ``async with``; stop it after."""
    options.setdefault("heartbeat_interval", 0.5)
    options.setdefault("lease", 5)
    options.setdefault("shutdown_timeout", 1)
    server = Server(redis, **options)
    task = asyncio.create_task(server.arun(mux))
    try:
        await asyncio.sleep(0)
        yield server
    finally:
        server.stop()
        await asyncio.wait_for(task, 20)


def stats(backend: Any, queue: str = "default") -> Any:
    """The queue's counts and counters (QueueStats), read directly on the backend."""
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    return SyncExecutor(backend.sync).run(Broker().stats(queue))


def serve_until(backend: Any, mux: ServeMux, done: Callable[[], Any], **options: Any) -> None:
    """Run a server on ``backend`` in a new event loop until ``done()`` (bounded: 10 s)."""

    async def main() -> None:
        async with serving(backend.new_async(), mux, **options):
            await until(done)

    asyncio.run(main())


def _busy() -> bool:
    """The machine has more runnable processes than CPUs (parallel tests, other jobs)."""
    return os.getloadavg()[0] > (os.cpu_count() or 1)


def _expired(start: float, timeout: float) -> bool:
    """``timeout`` seconds have passed since ``start``, or three times that while the machine is
    busy: a wait for a condition bounds a hang, it does not time the code (conftest's time bound
    still caps the test)."""
    elapsed = time.monotonic() - start
    return elapsed > timeout and (elapsed > 3 * timeout or not _busy())


async def until(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01) -> None:
    """Wait until ``pred()`` (sync or async) is truthy; fail after ``timeout`` seconds (stretched
    up to three times on a busy machine)."""
    start = time.monotonic()
    while True:
        value = pred()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return
        if _expired(start, timeout):
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def wait_sync(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> None:
    """Blocking twin of :func:`until`."""
    start = time.monotonic()
    while not pred():
        if _expired(start, timeout):
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def start_worker(url: str, target: str = "workers:mux", *args: str, env: dict[str, str] | None = None,
                 **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``asynqpy worker TARGET`` in a child process (tests dir on its path); ``popen``: more
    arguments for Popen (``start_new_session=True``: a process group to signal)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "asynqpy.cli.main", "--log-level", "WARNING", "worker", target,
           "--redis-url", url, *args]
    return subprocess.Popen(cmd, env=full_env, cwd=str(ROOT / "tests"), **popen)


def run_group(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)`` in a process group of
    its own, the whole group killed (SIGKILL) when it times out or the test is interrupted: a
    benchmark's redis-server and worker processes, children of the command, would outlive a plain
    run's timeout, which kills the command alone, and load every test after them."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    try:  # the command ended: anything of its group left behind goes too
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def loaded(group: Any) -> list[tuple[str, Any]]:
    """A click group's subcommands by name, each imported (the CLI loads them on first use)."""
    import click

    ctx = click.Context(group)
    return [(name, group.get_command(ctx, name)) for name in group.list_commands(ctx)]
