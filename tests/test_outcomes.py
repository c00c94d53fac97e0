"""Regression tests of issue 9 (state-machine bugs found by review) that need a running server or
its loops: every attempt ends with an outcome (item 2), huge retry delays (item 7), the lease
estimate after a long idle wait (item 6), wake tokens handed back (likely item 1), and a
recoverer pass that one failing task does not stop (item 1). On fakeredis and the real
redis-server (and the cluster where a script is involved)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from helpers import serve_until, serving, stats, until

from asynqpy import Client, Inspector, ServeMux, Task, TaskState
from asynqpy.core.model.codec import Message
from asynqpy.core.spine.broker import MAX_DELAY_MS, Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor


class BrokenText(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this __str__ is broken")


@pytest.mark.parametrize("policy_returns", [math.nan, math.inf, -5.0, "soon"])
def test_finish_a_broken_retry_policy_still_retries_the_task(backend: Any, policy_returns: Any) -> None:
    """Item 2: a retry_delay policy returning NaN (ValueError at int()), inf (OverflowError), a
    negative number or not a number left the task active forever (its lease renewed by the
    heartbeat). The default policy is used instead and the task is retried."""
    client = Client(backend.sync)
    mux = ServeMux()

    @mux.handle("fails")
    async def fails(task: Task) -> None:
        raise ValueError("boom")

    id = client.enqueue("fails").id

    serve_until(backend, mux, lambda: stats(backend).retry == 1, retry_delay=lambda n, e, t: policy_returns)
    info = Inspector(backend.sync).task_info("default", id)
    assert info.state is TaskState.RETRY and info.retried == 1 and info.last_error == "ValueError: boom"
    s = stats(backend)
    assert (s.active, s.failed) == (0, 1)


def test_finish_an_exception_whose_text_cannot_be_read(backend: Any) -> None:
    """Item 2: a handler exception whose __str__ raises left the task active forever."""
    client = Client(backend.sync)
    mux = ServeMux()

    @mux.handle("fails")
    def fails(task: Task) -> None:
        raise BrokenText()

    id = client.enqueue("fails", max_retry=0).id

    serve_until(backend, mux, lambda: stats(backend).archived == 1)
    info = Inspector(backend.sync).task_info("default", id)
    assert info.last_error == "BrokenText: <the exception's text could not be read>"


def test_finish_a_result_that_cannot_be_stored_archives_with_the_reason(backend: Any) -> None:
    """Item 2: a result msgpack cannot carry (kept with retention) raised while the outcome was
    written and left the task active. Its side effects ran: it is archived, not retried."""
    client = Client(backend.sync)
    mux = ServeMux()

    @mux.handle("returns")
    async def returns(task: Task) -> None:
        task.result = {1, 2}  # set directly: write_result would have refused it

    id = client.enqueue("returns", retention=60).id

    serve_until(backend, mux, lambda: stats(backend).archived == 1)
    info = Inspector(backend.sync).task_info("default", id)
    assert info.state is TaskState.ARCHIVED and info.retried == 0
    assert info.last_error.startswith("ResultError: result is not msgpack-serializable")


@pytest.mark.parametrize("seconds", [2.0 ** 60, 1e300])
def test_retry_with_a_huge_delay_is_capped(backend: Any, seconds: float) -> None:
    """Item 7: a retry delay of 1e19 ms or more overflowed the script's integer reply; the broker
    raised "unexpected reply" for a retry that had been written. Every delay is capped at
    MAX_DELAY_MS (100 years)."""
    client = Client(backend.sync)
    mux = ServeMux()

    @mux.handle("fails")
    async def fails(task: Task) -> None:
        raise ValueError("boom")

    id = client.enqueue("fails").id

    serve_until(backend, mux, lambda: stats(backend).retry == 1, retry_delay=lambda n, e, t: seconds)
    due = backend.sync.zscore(queue_keys("default").retry, id)
    assert 0 < due - Broker().clock.now_ms() <= MAX_DELAY_MS
    assert stats(backend).active == 0


def test_broker_caps_delays() -> None:
    b = Broker()
    for delay, expected in [(-1, 0), (math.nan, 0), (1.5, 1), (1e30, MAX_DELAY_MS), (math.inf, MAX_DELAY_MS)]:
        assert b.retry("q", "id", "tok00001", Message("t"), delay).args[3] == expected
        assert b.schedule("q", "id", Message("t"), delay).args[3] == expected


def test_wake_token_of_a_queue_not_served_is_handed_back(backend: Any) -> None:
    """Likely item 1, confirmed: an idle server of queues A and B took B's wake token, then filled
    its one slot from A (the dequeue that rides with the idle wait goes to the first queue in its
    order); B's token was gone, so the other servers of B slept until their idle timeout with B's
    task pending. Now the token is handed back, or B is served first. Invariant checked: a queue
    with pending tasks always has a wake token waiting."""
    if backend.kind == "cluster":
        pytest.skip("the two enqueues go in one MULTI, which a cluster refuses across slots")
    from asynqpy.redisio.replies import script_args

    client = Client(backend.sync)
    client.enqueue("warm-up", queue="c")  # loads the script's library, so FCALL works inside MULTI
    b = Broker()
    calls = [b.enqueue(q, f"task-{q}", Message("slow"), check_id=False) for q in "ab"]
    mux = ServeMux()
    started: list[str] = []

    async def main() -> None:
        release = asyncio.Event()

        @mux.handle("slow")
        async def slow(task: Task) -> None:
            started.append(task.queue)
            await release.wait()

        # wake keys in queue order, B's first: the idle wait pops B's token when both wait; strict
        # priority and weight 2 put A first in the fetch order; one slot
        async with serving(backend.new_async(), mux, queues={"b": 1, "a": 2}, strict_priority=True,
                           concurrency=1, idle_timeout=30):
            await asyncio.sleep(0.5)  # the server found nothing and blocks in its idle wait
            pipe = backend.sync.pipeline(transaction=True)  # both tokens appear at once
            for c in calls:
                pipe.execute_command(*script_args(c, True))
            pipe.execute()
            await until(lambda: len(started) == 1)
            await asyncio.sleep(0.2)
            for q in "ab":  # the queue left pending still has its token
                assert stats(backend, q).pending == 0 or backend.sync.llen(queue_keys(q).wake) == 1, q
            release.set()
            await until(lambda: stats(backend, "a").processed + stats(backend, "b").processed == 2)

    asyncio.run(main())


def test_lease_estimate_starts_when_the_idle_wait_ends(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 6: the local lease estimate was taken before the idle wait, so after a wait longer
    than the lease a fresh lease looked expired: the first failed heartbeat cancelled a healthy
    handler ("its lease could not be renewed in time"). Here the wait lasts 2.5 s, the lease 2 s,
    and the heartbeats fail while the 1 s handler runs: it must finish."""
    import redis

    from asynqpy.worker.heartbeat import Heartbeat

    client = Client(backend.sync)
    mux = ServeMux()
    done: list[str] = []

    @mux.handle("work")
    async def work(task: Task) -> None:
        await asyncio.sleep(1.0)
        done.append(task.id)

    real_beat = Heartbeat.beat

    async def beat(self: Heartbeat) -> None:
        if self.processor.held:  # Redis unreachable while the task runs (a short blip)
            raise redis.ConnectionError("injected: Redis unreachable")
        await real_beat(self)

    monkeypatch.setattr(Heartbeat, "beat", beat)

    async def main() -> None:
        async with serving(backend.new_async(), mux, lease=2, heartbeat_interval=0.3, idle_timeout=4):
            await asyncio.sleep(2.5)  # idle, blocked in the wait for longer than the lease
            client.enqueue("work")
            await until(lambda: stats(backend).processed == 1)

    asyncio.run(main())
    assert len(done) == 1
    s = stats(backend)
    assert (s.failed, s.retry, s.active) == (0, 0, 0)


def test_recoverer_pass_goes_on_past_a_task_that_fails(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 1: one task whose recovery failed (RedisFullError then, or any error) aborted the
    pass for every queue, on every pass. The other tasks and queues are recovered."""
    from asynqpy import FakeClock
    from asynqpy.worker.context import Context
    from asynqpy.worker.recoverer import Recoverer, RecovererParams
    from asynqpy.worker.settings import ServerOptions

    clock = FakeClock(1_700_000_000_000)
    b = Broker(clock)
    x = SyncExecutor(backend.sync)
    for q, ids in (("a", ["bad", "a-ok"]), ("b", ["b-ok"])):
        for id in ids:
            x.run(b.enqueue(q, id, Message("t")))
        x.run(b.dequeue(q, 2, 1000, "tok00001"))
    clock.advance(2)
    real_retry = Broker.retry

    def retry(self: Broker, queue: str, id: str, *args: Any, **kwargs: Any) -> Any:
        if id == "bad":
            raise RuntimeError("injected: a bug while recovering this task")
        return real_retry(self, queue, id, *args, **kwargs)

    monkeypatch.setattr(Broker, "retry", retry)

    async def main() -> float:
        ar = backend.new_async()
        ctx = Context(ar, clock)
        return await Recoverer(ctx, RecovererParams.of(ServerOptions(queues={"a": 1, "b": 1}).validate())).recover_once()

    wait = asyncio.run(main())
    assert wait <= 1.0  # the failed task is tried again soon
    for q, id in (("a", "a-ok"), ("b", "b-ok")):
        assert backend.sync.hget(queue_keys(q).tasks, id)[:1] == b"r", id
    assert backend.sync.hget(queue_keys("a").tasks, "bad")[:1] == b"a"  # still there, for the next pass
