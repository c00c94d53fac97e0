"""Handlers run by worker processes in the multi-process tests. They record each run in Redis db 1
(key ``runs``: task id -> times run) of the server named by $ASYNQPY_TEST_URL, so the test can
check that every handler ran exactly once (or exactly as often as the scenario says)."""

from __future__ import annotations

import asyncio
import os
import time

import redis
import redis.asyncio as aredis

from asynqpy import ServeMux, Task

mux = ServeMux()
_r: aredis.Redis | None = None


def _url1() -> str:
    return os.environ["ASYNQPY_TEST_URL"].rsplit("/", 1)[0] + "/1"


def _db1() -> aredis.Redis:
    global _r
    if _r is None:
        _r = aredis.Redis.from_url(_url1())
    return _r


@mux.handle("count")
async def count(task: Task) -> None:
    """A no-op that records that it ran."""
    await _db1().hincrby("runs", task.id, 1)


@mux.handle("block")
async def block(task: Task) -> None:
    """Signals that it started, then waits: for 60 s on the first attempt (long enough to be killed
    or shut down), and not at all once db1 key ``release`` exists or on a retry."""
    r = _db1()
    await r.hincrby("runs", task.id, 1)
    await r.sadd("started", task.id)
    if task.retry_count == 0:
        # the poll is a plain (blocking, sub-millisecond) call, so the shutdown's cancellation only
        # ever meets the sleep: cancelled inside an asyncio redis-py command, the handlers hung on
        # its connection past the server's 3 s (on a shared pool and on clients of their own alike;
        # test_graceful_shutdown_requeues_running_tasks[block] took 5.2 s to stop in CI, twice)
        plain = redis.Redis.from_url(_url1())
        for _ in range(6000):
            if plain.exists("release"):
                return
            await asyncio.sleep(0.01)


@mux.handle("block_sync")
def block_sync(task: Task) -> None:
    """A plain-def (thread pool) twin of ``block``."""
    url = os.environ["ASYNQPY_TEST_URL"].rsplit("/", 1)[0] + "/1"
    r = redis.Redis.from_url(url)
    r.hincrby("runs", task.id, 1)
    r.sadd("started", task.id)
    if task.retry_count == 0:
        for _ in range(6000):
            if r.exists("release"):
                return
            time.sleep(0.01)


@mux.handle("noop")
async def noop(task: Task) -> None:
    """Does nothing (the tests count it through the queue's processed counter)."""


@mux.handle("cancellable")
async def cancellable(task: Task) -> None:
    """Signals that it started, then waits up to 60 s; records in db1 ``cancelled`` (set of ids)
    if it is cancelled, and ``finished`` if it ever returns."""
    r = _db1()
    await r.sadd("started", task.id)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await r.sadd("cancelled", task.id)
        raise
    await r.sadd("finished", task.id)


@mux.handle("stubborn")
async def stubborn(task: Task) -> None:
    """Ignores cancellation (as a handler whose library swallows it would): only its process's
    exit ends it."""
    await _db1().sadd("started", task.id)
    for _ in range(600):
        try:
            await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            continue
