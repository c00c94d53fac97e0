"""Inspector.find_tasks (the console's search: a queue's tasks by id prefix and type, bounded
work per call, resumable by cursor) and Inspector.all_history (every queue's daily counters in
one round trip, for the console's charts), sync and async, on fakeredis, the real redis-server and
the Cluster (a queue's task hash and day counters are in its slot)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from asynqpy import AsyncInspector, Client, Inspector, InvalidArgumentError, QueueNotFoundError
from asynqpy.core.model.clock import Clock
from asynqpy.core.spine.keys import queue_keys


def _seed(backend: Any) -> None:
    with Client(backend.sync) as c:
        for i in range(12):
            c.enqueue("email" if i % 3 else "sms", {"i": i}, queue="fq", task_id=f"ord-{i:02d}")
        c.enqueue("sms", None, queue="fq", task_id="a*[b]?", process_in=600)
        c.enqueue("sms", None, queue="other", task_id="ord-00")


def test_find_tasks_by_prefix_and_type_sync_and_async(backend: Any) -> None:
    _seed(backend)
    with Inspector(backend.sync) as insp:
        cursor, found = insp.find_tasks("fq", id_prefix="ord-0")
        assert cursor == 0 and sorted(t.id for t in found) == [f"ord-{i:02d}" for i in range(10)]
        assert sorted(t.id for t in insp.find_tasks("fq", task_type="sms")[1]) == \
            ["a*[b]?", "ord-00", "ord-03", "ord-06", "ord-09"]
        assert [(t.id, t.state.value) for t in insp.find_tasks("fq", id_prefix="a*")[1]] == [("a*[b]?", "scheduled")]
        assert insp.find_tasks("fq", id_prefix="a")[1][0].id == "a*[b]?"
        assert insp.find_tasks("fq", id_prefix="*")[1] == []  # (a glob character matches itself only)
        with pytest.raises(QueueNotFoundError):
            insp.find_tasks("nope", id_prefix="x")
        for bad in ({"limit": 0}, {"limit": 1001}, {"cursor": -1}, {"limit": True}):
            with pytest.raises(InvalidArgumentError):
                insp.find_tasks("fq", id_prefix="x", **bad)

    async def main() -> list[str]:
        async with AsyncInspector(backend.new_async()) as a:
            return sorted(t.id for t in (await a.find_tasks("fq", id_prefix="ord-1", task_type="email"))[1])

    assert asyncio.run(main()) == ["ord-10", "ord-11"]


def test_all_history_reads_every_queue_in_one_round_trip(backend: Any) -> None:
    _seed(backend)
    today = Clock().today()
    backend.sync.set(queue_keys("fq").processed_on(today - timedelta(days=1)), 5)
    backend.sync.set(queue_keys("other").failed_on(today), 2)
    with Inspector(backend.sync) as insp:
        got = insp.all_history(2)
        assert sorted(got) == ["fq", "other"]
        assert [(d.date, d.processed, d.failed) for d in got["fq"]] == [(today, 0, 0), (today - timedelta(days=1), 5, 0)]
        assert got["other"][0].failed == 2 and got == {q: insp.history(q, 2) for q in ("fq", "other")}
        with pytest.raises(InvalidArgumentError):
            insp.all_history(0)

    async def main() -> int:
        async with AsyncInspector(backend.new_async()) as a:
            return len(await a.all_history(3))

    assert asyncio.run(main()) == 2


def test_find_tasks_goes_on_from_its_cursor_and_bounds_its_work() -> None:
    """A search stops after about SEARCH_SCAN fields looked at (SEARCH_BATCH per HSCAN), returning
    a cursor; going on from the cursors finds every match once the scan ends (cursor 0)."""
    import fakeredis

    from asynqpy.core.inspector.inspection import Plans
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    r = fakeredis.FakeRedis()
    with Client(r) as c:
        c.enqueue_many([("bulk", i) for i in range(600)], queue="big")
    plans, ex = Plans(Broker()), SyncExecutor(r)

    def run(plan: Any) -> Any:
        reply = None
        try:
            step = next(plan)
            calls = 0
            while True:
                calls += 1
                reply = ex.run_many(step)
                step = plan.send(reply)
        except StopIteration as done:
            return done.value, calls

    seen: set[str] = set()
    cursor, rounds = 0, 0
    while True:
        (cursor, found), calls = run(plans.find_tasks("big", "", "bulk", cursor, limit=1000, scan=100))
        assert calls == 1  # (SEARCH_BATCH fields >= scan: one HSCAN, then it returns)
        seen |= {t.id for t in found}
        rounds += 1
        if not cursor:
            break
    assert len(seen) == 600 and rounds >= 2
