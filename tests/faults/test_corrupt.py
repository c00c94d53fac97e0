"""Scenario 4: keys removed or corrupted by hand. The janitor's consistency sweep and the
recoverer reconcile them: no stuck task, no crash loop, no log spam; the worker keeps serving."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import Client, ServeMux, Task
from asynqpy.core.model.codec import Message, decode, encode
from asynqpy.core.spine.keys import queue_keys

Q = queue_keys("default")


def _msg(payload: Any) -> bytes:
    return encode(Message(type="job", payload=payload, retention_ms=3_600_000))


def _state(r: Any, id: str) -> str:
    v = r.hget(Q.tasks, id)
    return "" if v is None else v[:1].decode(errors="replace")


def test_corrupted_keys_are_reconciled_and_the_worker_keeps_going(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    r = backend.sync
    Client(r).enqueue("job", "warm-up", retention=3600)  # registers the queue
    r.hset(Q.tasks, "active-no-lease", b"a" + b"T0KEN123" + _msg("a"))  # active without a lease
    r.hset(Q.tasks, "sched-no-zset", b"s" + _msg("s"))  # scheduled, missing from its zset
    r.hset(Q.tasks, "retry-no-zset", b"r" + _msg("r"))  # retry, missing from its zset
    r.hset(Q.tasks, "weird-state", b"Z\x00\xffgarbage")  # a state byte that means nothing
    r.hset(Q.tasks, "garbage-msg", b"p\xc1\xc1\xc1not msgpack")  # garbage message, pending
    r.lpush(Q.pending, "garbage-msg")
    r.zadd(Q.lease, {"lease-no-task": 0})  # a lease without a task
    r.hset(Q.tasks, "archived-stray", b"x" + _msg("x"))  # archived, but its id also in pending
    r.zadd(Q.archived, {"archived-stray": int(time.time() * 1000)})
    r.lpush(Q.pending, "archived-stray", "no-data")  # ...and an id in pending with no data

    ran: list[Any] = []
    mux = ServeMux()

    @mux.handle("job")
    async def job(task: Task) -> None:
        ran.append(task.payload)

    async def main() -> None:
        async with serving(backend.new_async(), mux, reconcile_interval=0.2, recover_interval=0.1, lease=1,
                           heartbeat_interval=0.2, retry_delay=lambda n, e, t: 0.0):
            await until(lambda: {"warm-up", "a", "s", "r"} <= set(ran), timeout=15)
            await until(lambda: _state(r, "garbage-msg") == "x" and _state(r, "weird-state") == "x"
                        and r.zscore(Q.lease, "lease-no-task") is None, timeout=10)
            Client(r).enqueue("job", "after", retention=3600)  # the worker still serves new work
            await until(lambda: "after" in ran, timeout=10)
            seen = len(caplog.records)
            await asyncio.sleep(1.0)  # five more sweeps: nothing left to repair, nothing to say
            assert [rec.getMessage() for rec in caplog.records[seen:] if rec.levelno >= logging.WARNING] == []

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert sorted(ran) == sorted(["warm-up", "a", "s", "r", "after"])  # each ran once; stray copies never
    assert "x" not in ran
    for id in ("active-no-lease", "sched-no-zset", "retry-no-zset"):
        assert _state(r, id) == "c" and r.zscore(Q.completed, id) is not None
    assert decode(r.hget(Q.tasks, "garbage-msg")[1:]).last_error  # archived with the reason
    assert r.zscore(Q.archived, "weird-state") is not None
    assert _state(r, "archived-stray") == "x" and r.zscore(Q.archived, "archived-stray") is not None
    assert r.llen(Q.pending) == 0 and r.zcard(Q.lease) == 0
    warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(warnings) <= 15, [w.getMessage() for w in warnings]
