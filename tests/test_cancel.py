"""Cancelling a running task end to end: Inspector.cancel archives it atomically and announces it;
the worker cancels the handler at once (pub/sub), or at its next lease renewal if it missed the
message; nothing the worker does afterwards reaches Redis. At the script level: the cancel ends
the lease at once, so an operator's run_task may hand the task to a worker again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
import redis
from helpers import serving, start_worker, until, wait_sync

from asynqpy import Client, FakeClock, Inspector, ServeMux, Task, TaskState
from asynqpy.core.model import codec
from asynqpy.core.model.errors import LeaseLostError
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor
from asynqpy.worker.canceller import Canceller

REASON = "cancelled by an operator"


def _archived_untouched(insp: Inspector, id: str) -> None:
    info = insp.task_info("default", id)
    assert info.state is TaskState.ARCHIVED and info.last_error == REASON and info.retried == 0
    s = insp.stats("default")
    assert (s.active, s.pending, s.retry, s.processed, s.failed) == (0, 0, 0, 0, 0)


def _mux(events: dict[str, asyncio.Event], runs: list[str]) -> ServeMux:
    mux = ServeMux()

    @mux.handle("long")
    async def long(task: Task) -> None:
        runs.append(task.id)
        events["started"].set()
        if len(runs) > 1:
            return  # the re-run after the operator runs it from the archive
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events["cancelled"].set()
            raise
        events["finished"].set()

    return mux


def test_cancel_stops_the_handler_at_once_then_run_again(backend: Any) -> None:
    client = Client(backend.sync)
    insp = Inspector(backend.sync)
    runs: list[str] = []

    async def main() -> None:
        events = {k: asyncio.Event() for k in ("started", "cancelled", "finished")}
        # heartbeat every 3 s: a cancel seen within 1 s came from the pub/sub notice, not a renewal
        async with serving(backend.new_async(), _mux(events, runs), heartbeat_interval=3, lease=10):
            id = client.enqueue("long").id
            await asyncio.wait_for(events["started"].wait(), 10)
            await asyncio.sleep(0.2)  # the canceller is subscribed by now
            t0 = time.monotonic()
            info = await asyncio.to_thread(insp.cancel, id)
            assert info.state is TaskState.ARCHIVED and info.last_error == REASON
            await asyncio.wait_for(events["cancelled"].wait(), 5)
            assert time.monotonic() - t0 < 1.0
            await asyncio.sleep(0.3)  # the worker would have written by now, if it were going to
            _archived_untouched(insp, id)
            assert not events["finished"].is_set()
            events["started"].clear()
            insp.run_task("default", id)  # the operator runs it again from the archive
            await until(lambda: insp.stats("default").processed == 1)
        assert runs == [id, id]

    asyncio.run(main())


def test_missed_notice_caught_by_lease_renewal(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    async def deaf(self: Canceller) -> None:  # the notice is lost (e.g. while reconnecting)
        await self.ctx.stopping.wait()

    monkeypatch.setattr(Canceller, "run", deaf)
    client = Client(backend.sync)
    insp = Inspector(backend.sync)
    runs: list[str] = []

    async def main() -> None:
        events = {k: asyncio.Event() for k in ("started", "cancelled", "finished")}
        async with serving(backend.new_async(), _mux(events, runs), heartbeat_interval=0.2, lease=5):
            id = client.enqueue("long").id
            await asyncio.wait_for(events["started"].wait(), 10)
            insp.cancel(id)
            await asyncio.wait_for(events["cancelled"].wait(), 3)  # within a heartbeat or two
            await asyncio.sleep(0.3)
            _archived_untouched(insp, id)

    asyncio.run(main())


def test_cancel_a_sync_handler_writes_nothing(backend: Any) -> None:
    """A plain-def handler cannot be interrupted: its slot is freed and its outcome dropped."""
    client = Client(backend.sync)
    insp = Inspector(backend.sync)
    mux = ServeMux()
    started, release, returned = threading.Event(), threading.Event(), threading.Event()

    @mux.handle("blocking")
    def blocking(task: Task) -> None:
        started.set()
        release.wait(20)
        returned.set()

    async def main() -> None:
        async with serving(backend.new_async(), mux, heartbeat_interval=3, lease=10):
            id = client.enqueue("blocking").id
            await asyncio.to_thread(started.wait, 10)
            await asyncio.sleep(0.2)
            insp.cancel(id, queue="default")
            await until(lambda: not insp.servers() or not insp.servers()[0].active, 8)
            release.set()
            await asyncio.to_thread(returned.wait, 10)
            await asyncio.sleep(0.3)
            _archived_untouched(insp, id)

    asyncio.run(main())


def _db1(url: str) -> redis.Redis:
    return redis.Redis.from_url(url.rsplit("/", 1)[0] + "/1")


@pytest.mark.real
@pytest.mark.slow
def test_cancel_in_a_worker_process(redis_url: str) -> None:
    db1 = _db1(redis_url)
    db1.flushdb()
    with Client(redis_url) as c:
        id = c.enqueue("cancellable").id
    # default heartbeat (5 s) and lease (30 s): only the pub/sub notice can be this fast
    w = start_worker(redis_url, "workers:mux", env={"ASYNQPY_TEST_URL": redis_url})
    insp = Inspector(redis_url)
    try:
        wait_sync(lambda: db1.sismember("started", id), 15)
        time.sleep(0.2)
        t0 = time.monotonic()
        insp.cancel(id)
        wait_sync(lambda: db1.sismember("cancelled", id), 5)
        assert time.monotonic() - t0 < 1.0
        time.sleep(0.3)
        _archived_untouched(insp, id)
        assert not db1.sismember("finished", id)
        assert [s.active for s in insp.servers()] == [[]]
    finally:
        if w.poll() is None:
            os.kill(w.pid, signal.SIGTERM)
        try:
            assert w.wait(20) == 0
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
            raise


def test_a_cancelled_run_ends_its_lease_so_run_task_may_hand_it_out_again(backend: Any) -> None:
    """An operator's cancel ends the run's lease at once (cancel.lua removes the lease entry and
    the token from the record, freeing its concurrency slot), so ``run_task`` makes the task
    pending and a worker may take it again while the cancelled handler's 30 s lease has not
    run out: that is two hand-outs by design, not a task run twice under a live lease. The
    cancelled worker's late write is refused by the token check and changes nothing of the new
    run. (The cross-feature model, tests/test_model.py, held the cancelled run's lease as live;
    its shortest failing sequence was this one.)"""
    q = "cancelrun"
    k = queue_keys(q)
    clock = FakeClock(1_740_866_400_000)
    b = Broker(clock)
    x = SyncExecutor(backend.sync)
    with Client(backend.sync, clock=clock) as client, Inspector(backend.sync, clock=clock) as insp:
        x.run(b.register_queues([q]))
        insp.set_limits(q, concurrency=1)
        id = client.enqueue("t", 1, queue=q, task_id="t11", max_retry=1).id
        first = x.run(b.dequeue(q, 1, 30_000, "w0000001"))
        assert [i for i, _ in first.tasks] == [id]
        assert insp.cancel(id, q).state is TaskState.ARCHIVED
        assert backend.sync.zcard(k.lease) == 0  # the lease (the slot) ended with the cancel
        insp.run_task(q, id)
        again = x.run(b.dequeue(q, 1, 30_000, "w0000002"))  # same instant: the first lease's 30 s not over
        assert [i for i, _ in again.tasks] == [id] and not again.slot_bound
        msg = codec.decode(first.tasks[0][1])
        with pytest.raises(LeaseLostError):  # the cancelled worker's late write
            x.run(b.done(q, id, "w0000001", msg))
        v = backend.sync.hget(k.tasks, id)
        assert v[:1] == b"a" and v[1:9] == b"w0000002"  # the new run holds it, untouched
        assert [m.decode() for m in backend.sync.zrange(k.lease, 0, -1)] == [id]
        x.run(b.done(q, id, "w0000002", msg))
        assert backend.sync.hget(k.tasks, id) is None and backend.sync.zcard(k.lease) == 0
