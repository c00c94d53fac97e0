"""Testing code that uses asynqpy: :func:`drain` and a pytest plugin.

``drain(app)`` runs every task queued for an :class:`App` (or a ServeMux) to completion, in the
calling process, scheduled ones and retries included: a fake clock jumps to each next due time, so
a task enqueued ``process_in=3600`` or retried after a backoff runs at once. It returns what
happened and, by default, fails with the tracebacks of the tasks that ended archived.

The pytest plugin (installed with ``pip install '.[pytest]' in asynqpy's repository``; registered through the
``pytest11`` entry point) gives these fixtures:

- ``asynqpy_url``: a Redis for this test, empty. A real ``redis-server`` on a free port when one is
  installed (one per test session, flushed before each test), else an in-process ``memory://``
  store (fakeredis with Lua, the same scripts) of the test's own;
- ``asynqpy_client``: a :class:`Client` on it;
- ``asynqpy_drain``: :func:`drain` bound to it: ``asynqpy_drain(app)``.

Bind your App to the fixture's Redis with ``App(asynqpy_url)``, or keep your module-level app and
point it there: ``app.redis = asynqpy_url`` (before it made a client).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis as redis_py
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio import RedisCluster as AsyncRedisCluster

from .app import App
from .client import Client
from .core.deploy.versions import HOLD_FLOOR, encode_version
from .core.handlers.mux import ServeMux
from .core.inspector.inspection import QueueInfo
from .core.model.clock import FakeClock
from .core.model.errors import InvalidArgumentError
from .core.model.task import TaskInfo, TaskState
from .core.spine.broker import Broker, Call
from .core.spine.keys import queue_keys
from .inspector import AsyncInspector
from .redisio.connection import async_client
from .server import Server

__all__ = ["DrainReport", "DrainError", "drain", "adrain"]


class DrainError(AssertionError):
    """Tasks ended archived during :func:`drain` (their errors and tracebacks are the message)."""


@dataclass
class DrainReport:
    """What :func:`drain` did: ``processed`` attempts run (successes and failures), ``failed``:
    the tasks that ended archived (with ``last_error`` and ``traceback``), ``completed``: tasks
    kept as completed (with a ``retention``)."""

    processed: int = 0
    failed: list[TaskInfo] = field(default_factory=list)
    completed: list[TaskInfo] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.processed} attempt(s) run, {len(self.failed)} task(s) archived"]
        for t in self.failed:
            lines += [f"--- {t.type} {t.id} (queue {t.queue}): {t.last_error}", t.traceback.rstrip()]
        return "\n".join(lines)


def drain(target: App | ServeMux, redis: Any = None, *, queues: list[str] | None = None, timeout: float = 30.0,
          raise_on_failure: bool = True, **server_options: Any) -> DrainReport:
    """Run every queued task of ``target`` to completion in this process (see the module
    docstring). ``redis``: default the App's; ``queues``: default the App's task queues (a
    ServeMux: "default"). Raises :class:`DrainError` if a task ended archived (unless
    ``raise_on_failure`` is False), TimeoutError if the queues are not empty after ``timeout``
    seconds (a task that keeps scheduling others, or a handler that never returns)."""
    return asyncio.run(adrain(target, redis, queues=queues, timeout=timeout, raise_on_failure=raise_on_failure,
                              **server_options))


async def adrain(target: App | ServeMux, redis: Any = None, *, queues: list[str] | None = None,
                 timeout: float = 30.0, raise_on_failure: bool = True, **server_options: Any) -> DrainReport:
    """:func:`drain`, awaited (inside a running event loop)."""
    mux, redis, names, server_options = _target(target, redis, queues, server_options)
    held = _held(names, server_options.get("version"))
    redis = _async_twin(redis)
    insp = AsyncInspector(redis)
    before = {q: set(await _archived(insp, q)) for q in names}
    processed0 = {q: await _processed(insp, q) for q in names}
    clock = FakeClock(int(time.time() * 1000))
    options = {"shutdown_timeout": 1.0, "heartbeat_interval": 1.0, "idle_timeout": 1.0, **server_options}
    server = Server(redis, queues=names, clock=clock, **options)
    running = asyncio.create_task(server.arun(mux))
    try:
        await _run_until_empty(running, redis, insp, names, held, clock, timeout)
    finally:
        server.stop()
        await asyncio.wait_for(running, 10)
    report = await _report(insp, names, before, processed0)
    if raise_on_failure and report.failed:
        raise DrainError(str(report))
    return report


def _target(target: App | ServeMux, redis: Any, queues: list[str] | None,
            server_options: dict[str, Any]) -> tuple[ServeMux, Any, list[str], dict[str, Any]]:
    """What to drain: the handlers, the Redis, the queue names and the server's options. An App
    gives its own (its Redis, its task queues, its startup and shutdown hooks, its version, its
    signing key and key ring);
    a ServeMux drains "default" unless told."""
    if not isinstance(target, App):
        return target, redis, queues or ["default"], server_options
    options = {"signing_key": target.signing_key, "encryption": target.encryption,  # (as App.server's)
               "on_startup": [target._hook(h) for h in target.startup],
               "on_shutdown": [target._hook(h) for h in target.shutdown],
               **{k: v for k, v in target.server_options.items() if k == "version"},  # (its gated tasks)
               **server_options}
    return (target.mux, redis if redis is not None else target.redis,
            queues or sorted(target.server().options.queues), options)


def _held(names: list[str], version: Any) -> list[Call[bool]]:
    """The reads of whether an older worker set tasks aside for this version in each queue."""
    code = encode_version(version) if isinstance(version, str) and version else 0
    return [Broker().version_held(q, code) for q in names] if code else []


async def _processed(insp: AsyncInspector, queue: str) -> int:
    return (await insp.queue_info(queue)).processed_total if queue in await insp.queues() else 0


async def _run_until_empty(running: asyncio.Task[None], redis: Any, insp: AsyncInspector, names: list[str],
                           held: list[Call[bool]], clock: FakeClock, timeout: float) -> None:
    """Poll the queues until nothing is pending, active, targeted, on its way to a child or
    held for this version, and nothing is scheduled: the fake clock jumps to each next due task."""
    deadline = time.monotonic() + timeout
    quiet = 0  # consecutive looks that found nothing left
    while True:
        if running.done():
            running.result()  # a startup hook that failed: its error
            raise RuntimeError("the server stopped while draining")
        due, infos, busy = await _look(redis, insp, names, held)
        if not busy:
            if due is None:
                due = await _next_due(redis, names)
            if due is None:
                # a look is several reads, not one snapshot: a task that failed (active ->
                # retry) between its first read and the counts, then was forwarded (retry ->
                # pending) before its last read, was in none of them (seen under load: a
                # retried task's second attempt never ran). Two looks in a row must agree;
                # hiding in both takes two whole attempts failing inside the two looks
                quiet += 1
                if quiet == 2:
                    return
                continue
            await _jump(clock, redis, names, due)
        quiet = 0
        if time.monotonic() > deadline:
            raise TimeoutError(f"drain: tasks left after {timeout}s: "
                               + ", ".join(f"{i.queue} pending={i.pending} active={i.active}" for i in infos))
        await asyncio.sleep(0.005)


async def _look(redis: Any, insp: AsyncInspector, names: list[str],
                held: list[Call[bool]]) -> tuple[int | None, list[QueueInfo], bool]:
    """One look at the queues: the next due task, each queue's counts, and whether work is left."""
    # the next due task is read before the counts and again after them: a forwarder that
    # moved a task from retry to pending between the counts and one read of the zsets
    # (just after the clock jumped) made it look as if nothing was left, and drain returned early
    due = await _next_due(redis, names)
    # parents' ends on their way to their children (the queue's outbox): the propagator
    # releases those children next, so the work is not done (drain returned with a
    # chain's or a fan-in's children still waiting). Read before the counts and again
    # after them: an end the propagator turned into a pending child between the two reads
    # is in one of them or in the counts (read only after the counts, a child released
    # between them was in neither, and drain returned with it pending: seen under load)
    ends = await _ends(redis, names)
    infos = [await insp.queue_info(q) for q in names if q in await insp.queues()]
    ends += await _ends(redis, names)
    # and tasks an older worker set aside for this version: the server's next dequeue of
    # their queue takes them back (no wake token announces them; drain returned at once)
    ends += sum([await _read(redis, call) for call in held])
    idle = ends == 0 and all(i.pending == 0 and i.active == 0 and i.targeted == 0 for i in infos)
    return due, infos, not idle


async def _jump(clock: FakeClock, redis: Any, names: list[str], due: int) -> None:
    """The fake clock jumps to the next due task, and each queue's forwarder is woken: it was
    sleeping until a later (fake) time."""
    clock.t = max(clock.t, due + 1)
    for q in names:
        await redis.lpush(queue_keys(q).tick, "1")


async def _report(insp: AsyncInspector, names: list[str], before: dict[str, set[str]],
                  processed0: dict[str, int]) -> DrainReport:
    """What the drain did: attempts run since the start, tasks newly archived, tasks kept completed."""
    report = DrainReport()
    for q in names:
        if q not in await insp.queues():
            continue
        report.processed += (await insp.queue_info(q)).processed_total - processed0[q]
        for id in await _archived(insp, q):
            if id not in before[q]:
                report.failed.append(await insp.task_info(q, id))
        report.completed += await insp.list_tasks(q, TaskState.COMPLETED, page_size=1000)
    return report


def _async_twin(redis: Any) -> Any:
    """An asyncio client for what the App or the caller gave: a URL, an asyncio client, or a sync
    client of one Redis (redis-py or fakeredis) whose connection settings are reused."""
    if redis is None or isinstance(redis, str):
        return async_client(redis)
    if isinstance(redis, (AsyncRedis, AsyncRedisCluster)) or \
            type(redis).__name__.startswith("FakeAsync"):
        return redis
    kwargs = dict(getattr(getattr(redis, "connection_pool", None), "connection_kwargs", {}) or {})
    if "server" in kwargs:  # fakeredis: the same in-process server
        import fakeredis

        return fakeredis.FakeAsyncRedis(server=kwargs["server"])
    if isinstance(redis, redis_py.Redis):
        kwargs.pop("retry", None)
        return AsyncRedis(**{k: v for k, v in kwargs.items() if k in _ASYNC_KWARGS})
    raise InvalidArgumentError("drain needs a Redis URL or an asyncio client for this Redis")


_ASYNC_KWARGS = {"host", "port", "db", "username", "password", "socket_timeout", "socket_connect_timeout",
                 "socket_keepalive", "ssl", "path"}


async def _archived(insp: AsyncInspector, queue: str) -> list[str]:
    if queue not in await insp.queues():
        return []
    return [t.id for t in await insp.list_tasks(queue, TaskState.ARCHIVED, page_size=1000)]


async def _ends(redis: Any, queues: list[str]) -> int:
    """Parents' ends not yet delivered to their children (the queues' outboxes)."""
    return sum([int(await redis.xlen(queue_keys(q).outbox)) for q in queues])


async def _read(redis: Any, call: Call[bool]) -> bool:
    return call.parse(await redis.execute_command(*call.command))


async def _next_due(redis: Any, queues: list[str]) -> int | None:
    due: list[int] = []
    for q in queues:
        k = queue_keys(q)
        for zset in (k.scheduled, k.retry):
            first = await redis.zrange(zset, 0, 0, withscores=True)
            if first and first[0][1] < HOLD_FLOOR:  # (a task held by a deploy hold is never due)
                due.append(int(first[0][1]))
    return min(due) if due else None


# -- the pytest plugin --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _RedisServer:
    """A throw-away redis-server on a free loopback port (no persistence)."""

    def __init__(self, binary: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="asynqpy-pytest-")
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        r = redis_py.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                r.ping()
                break
            except redis_py.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("asynqpy pytest plugin: redis-server did not start") from None
                time.sleep(0.02)
        r.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


try:
    import pytest
except ImportError:  # the module still gives drain() without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def _asynqpy_redis_server() -> Iterator[_RedisServer | None]:
        binary = shutil.which("redis-server")
        if binary is None or os.environ.get("ASYNQPY_TEST_MEMORY"):
            yield None
            return
        server = _RedisServer(binary)
        try:
            yield server
        finally:
            server.stop()

    @pytest.fixture
    def asynqpy_url(_asynqpy_redis_server: _RedisServer | None) -> str:
        """An empty Redis for this test: a real redis-server when one is installed (set
        $ASYNQPY_TEST_MEMORY=1 to always use memory://), else a memory:// store of its own."""
        if _asynqpy_redis_server is None:
            return f"memory://asynqpy-test-{uuid.uuid4().hex}"
        r = redis_py.Redis.from_url(_asynqpy_redis_server.url)
        r.flushall()
        r.close()
        return _asynqpy_redis_server.url

    @pytest.fixture
    def asynqpy_client(asynqpy_url: str) -> Iterator[Client]:
        """A :class:`Client` on the test's Redis."""
        with Client(asynqpy_url) as client:
            yield client

    @pytest.fixture
    def asynqpy_drain(asynqpy_url: str) -> Any:
        """:func:`drain` on the test's Redis: ``asynqpy_drain(app)`` runs every queued task."""

        def run(target: App | ServeMux, **kwargs: Any) -> DrainReport:
            return drain(target, asynqpy_url, **kwargs)

        return run
