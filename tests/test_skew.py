"""A worker whose clock is 60 s off neither steals a live lease nor runs a scheduled task early:
every lease and schedule decision is made on the Redis server's clock."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers import serving, until

from asynqpy import Client, ServeMux, Task
from asynqpy.core.broker import Broker
from asynqpy.core.keys import queue_keys
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
