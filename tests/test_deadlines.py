"""Handlers' time limits without a timer per task (asynqpy/worker/deadlines.py): a far limit gets
its timer from the tick, which fires at the limit itself; a handler that ends first leaves nothing
behind; the tick stops once no far limit is left."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from helpers import serving, stats, until

from asynqpy import Client, Inspector, ServeMux, Task
from asynqpy.core.spine.keys import queue_keys
from asynqpy.worker import deadlines
from asynqpy.worker.deadlines import Deadlines


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "HORIZON", 0.2)
    monkeypatch.setattr(deadlines, "TICK", 0.1)


def test_near_and_far_limits_fire_at_the_limit_and_the_ended_ones_never(short: None) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fired: dict[str, float] = {}
        d = Deadlines(lambda r: fired.setdefault(r, loop.time()))
        t0 = loop.time()
        d.arm("near", 0.1)  # within the horizon: its timer at once
        d.arm("far", 0.5)  # noted; the tick gives it its timer
        d.arm("ended", 0.4)
        d.arm("none", None)  # no limit
        assert set(d.timers) == {"near"} and set(d.far) == {"far", "ended"}
        await asyncio.sleep(0.25)
        d.disarm("ended")  # its handler ended first (its timer was armed by now, or not yet)
        await until(lambda: "far" in fired, 5)
        await asyncio.sleep(0.3)
        assert set(fired) == {"near", "far"}
        # never early, and fired: the upper bounds are generous (a loaded machine's loop runs late)
        assert 0.09 <= fired["near"] - t0 < 1.5 and 0.49 <= fired["far"] - t0 < 2.0
        assert d.timers == {} and d.far == {} and d._tick is None  # nothing left, the tick stopped

    asyncio.run(main())


def test_a_far_timeout_cancels_its_handler_at_the_limit(backend: Any, short: None) -> None:
    """Through a server: a timeout past the horizon (its timer armed by the tick) cancels the
    handler at its limit, archived with TaskTimeoutError; a quick task beside it is unaffected."""
    client = Client(backend.sync)
    mux = ServeMux()
    took: list[float] = []

    @mux.handle("slow")
    async def slow(task: Task) -> None:
        start = time.monotonic()
        try:
            await asyncio.sleep(10)
        finally:
            took.append(time.monotonic() - start)

    @mux.handle("quick")
    async def quick(task: Task) -> None:
        pass

    client.enqueue("slow", None, timeout=0.6, max_retry=0)
    client.enqueue("quick", None, timeout=5)

    async def main() -> None:
        async with serving(backend.new_async(), mux, concurrency=2):
            await until(lambda: stats(backend).archived == 1 and stats(backend).processed >= 1, 10)

    asyncio.run(main())
    assert took and 0.55 <= took[0] < 5  # cancelled at its limit (not early; not after the 10 s sleep)
    [id] = [i.decode() for i in backend.sync.zrange(queue_keys("default").archived, 0, -1)]
    assert "TaskTimeoutError" in Inspector(backend.sync).task_info("default", id).last_error
