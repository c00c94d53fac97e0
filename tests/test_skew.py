"""A worker whose clock is 60 s off neither steals a live lease nor runs a scheduled task early:
every lease and schedule decision is made on the Redis server's clock."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers import serving, until

from asynqpy import Client, ServeMux, Task
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

pytestmark = pytest.mark.real


@pytest.mark.parametrize("skew", [60.0, -60.0])
def test_skewed_worker_neither_steals_nor_runs_early(redis_url: str, monkeypatch: pytest.MonkeyPatch, skew: float) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    client = Client(r)
    live = client.enqueue("t", "held elsewhere").id
    SyncExecutor(r).run(Broker().dequeue("default", 1, 3000, "healthy1"))  # a healthy worker holds it
    mux = ServeMux()
    ran: dict[str, float] = {}

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran[task.payload] = time.monotonic()

    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew)  # this whole process is off by 60 s

    async def main() -> None:
        async with serving(redis_url, mux, lease=5, heartbeat_interval=0.2, recover_interval=0.2):
            t0 = time.monotonic()
            client.enqueue("t", "scheduled", process_in=1.0)
            await asyncio.sleep(1.5)  # the recoverer ran several times meanwhile
            assert r.hget(queue_keys("default").tasks, live)[:9] == b"ahealthy1"  # not stolen
            assert "held elsewhere" not in ran
            await until(lambda: "scheduled" in ran, 3)
            assert ran["scheduled"] - t0 >= 0.99  # not early, though the local clock is 60 s off

    asyncio.run(main())


def test_a_late_read_of_the_idle_waits_dequeue_does_not_set_the_clock(redis_url: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The dequeue that rides with the idle wait (worker/wake.py) has no known send time: its reply
    read late (a busy loop) was taken as a round trip of 0 and set the clock's offset off by the
    delay, so a task's completed_at came before its start (the fault suite's audit saw 213 ms).
    Here the wait's result reaches the worker 400 ms after its reply: completed_at must not be
    earlier than the start the handler saw."""
    from asynqpy import Inspector
    from asynqpy.worker.wake import PipelinedWait

    real_wait = PipelinedWait.wait
    waits: list[int] = []

    async def late_wait(self: PipelinedWait, *args: object, **kwargs: object) -> object:
        waits.append(1)
        out = await real_wait(self, *args, **kwargs)  # type: ignore[arg-type]
        await asyncio.sleep(0.4)  # the loop busy elsewhere before the reply is looked at
        return out

    monkeypatch.setattr(PipelinedWait, "wait", late_wait)
    mux = ServeMux()
    started: list[float] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        started.append(time.time())

    async def main() -> float:
        async with serving(redis_url, mux, heartbeat_interval=2):
            await until(lambda: waits)  # idle, in the wait: the task comes with its dequeue
            with Client(redis_url) as c:
                id = c.enqueue("t", retention=60).id
            with Inspector(redis_url) as insp:
                await until(lambda: insp.task_info("default", id).state.value == "completed")
                at = insp.task_info("default", id).completed_at
                assert at is not None
                return at.timestamp()

    completed = asyncio.run(main())
    assert completed >= started[0] - 0.05, (completed, started[0])


def test_a_fake_clock_moved_during_the_idle_wait_is_the_time_the_lease_is_taken_at(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dequeue that rides with the idle wait is sent before the wait: with a FakeClock its
    "now" was the clock's before the wait, so a clock moved during it (drain jumps to the next
    scheduled task) gave the task a lease already expired at the new time; the recoverer then
    retried it while it ran (the pytest plugin's drain counted a task twice in CI). A fake-clocked
    server does not ride a dequeue with its wait."""
    from asynqpy.core.model.clock import FakeClock
    from asynqpy.worker.wake import PipelinedWait

    real_wait = PipelinedWait.wait
    waits: list[int] = []

    async def counted(self: PipelinedWait, *args: object, **kwargs: object) -> object:
        waits.append(1)
        return await real_wait(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PipelinedWait, "wait", counted)
    import redis

    clock = FakeClock()
    r = redis.Redis.from_url(redis_url)
    leases: list[float] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        leases.append(float(r.zscore(queue_keys("default").lease, task.id) or 0))

    async def main() -> None:
        async with serving(redis_url, mux, clock=clock, lease=30):
            await until(lambda: waits)  # idle, in the wait
            clock.advance(3600)  # as drain jumps to a task due in an hour
            with Client(redis_url) as c:
                c.enqueue("t")
            await until(lambda: leases)

    asyncio.run(main())
    assert leases[0] >= clock.t + 29_000, (leases[0], clock.t)
