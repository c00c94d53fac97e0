"""AsyncClient.enqueue from many coroutines at once, and Client.enqueue from many threads: their
enqueues share pipelined round trips (one connection), each still gets its own TaskInfo or typed
error, and one coroutine's (thread's) tasks stay in order. On fakeredis, redis-server and the
cluster."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from helpers import wait_sync

from asynqpy import AsyncClient, Client, Inspector, TaskIdConflictError, TaskInfo, TaskState


def test_concurrent_enqueues_coalesce_and_keep_their_own_outcomes(backend: Any) -> None:
    async def main() -> None:
        async with AsyncClient(backend.new_async()) as c:
            await c.enqueue("t", task_id="taken", queue="pq")
            sent: list[tuple[str, int]] = []
            original = c._exec.run_many
            batches: list[int] = []

            async def counting(calls: Any) -> Any:
                batches.append(len(calls))
                return await original(calls)

            c._exec.run_many = counting  # type: ignore[method-assign]

            async def producer(k: int) -> list[Any]:
                out: list[Any] = []
                for i in range(5):
                    try:
                        out.append(await c.enqueue("t", [k, i], queue="pq", task_id="taken" if (k, i) == (7, 2) else None))
                        sent.append((f"{k}", i))
                    except TaskIdConflictError as exc:
                        out.append(exc)
                return out

            results = await asyncio.gather(*(producer(k) for k in range(50)))
            assert isinstance(results[7][2], TaskIdConflictError)  # only that call failed
            assert sum(1 for r in results for x in r if not isinstance(x, Exception)) == 249
            assert max(batches) > 10  # calls of different coroutines went out together
            pool = getattr(c.redis, "connection_pool", None)
            if pool is not None:
                assert len(pool._available_connections) + len(pool._in_use_connections) <= 2
        with Inspector(backend.sync) as insp:
            tasks = insp.list_tasks("pq", TaskState.PENDING, page_size=1000)
        order: dict[int, list[int]] = {}
        for t in tasks:  # list_tasks(pending) gives the oldest first (the order workers take them)
            if t.payload is not None:
                order.setdefault(t.payload[0], []).append(t.payload[1])
        assert all(v == sorted(v) for v in order.values())  # each coroutine's tasks in its order
        assert len(tasks) == 250  # and the task that held the id

    asyncio.run(main())


def test_threads_enqueueing_at_once_share_round_trips_and_keep_their_own_outcomes(backend: Any) -> None:
    """The sync Client from many threads: a thread queued behind a round trip in flight is woken
    to send the queue in one pipeline; each thread gets its own TaskInfo or error, in its order,
    and a failure of the connection reaches exactly the calls that were in that round trip."""
    with Client(backend.sync) as c:
        c.enqueue("t", task_id="taken", queue="tq")
        original = c._exec.run_many_now  # (what the client's round trips call)
        batches: list[int] = []
        gate = threading.Event()

        def counting(calls: Any) -> Any:
            batches.append(len(calls))
            gate.wait(5)  # hold the first pipelined round trip so the others queue up behind it
            return original(calls)

        c._exec.run_many_now = counting  # type: ignore[method-assign]
        results: dict[int, list[Any]] = {}

        def producer(k: int) -> None:
            out: list[Any] = []
            for i in range(5):
                try:
                    out.append(c.enqueue("t", [k, i], queue="tq", task_id="taken" if (k, i) == (3, 2) else None))
                except TaskIdConflictError as exc:
                    out.append(exc)
            results[k] = out

        threads = [threading.Thread(target=producer, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        gate.set()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        assert isinstance(results[3][2], TaskIdConflictError)  # only that call failed
        assert sum(1 for r in results.values() for x in r if isinstance(x, TaskInfo)) == 39
        assert max(batches) > 1  # calls of different threads went out together

        def broken(calls: Any) -> Any:
            raise ConnectionError("down")

        c._exec.run_many_now = broken  # type: ignore[method-assign]
        c._pipeline.busy = True  # a round trip in flight: the next call queues behind it
        errors: list[BaseException] = []

        def failing() -> None:
            try:
                c.enqueue("t", queue="tq")
            except ConnectionError as exc:
                errors.append(exc)

        t = threading.Thread(target=failing)
        t.start()
        wait_sync(lambda: bool(c._pipeline.queued), 5)
        c._pipeline._hand_over()  # the round trip ends: the queued thread sends (and fails)
        t.join(10)
        assert len(errors) == 1 and not c._pipeline.busy
    with Inspector(backend.sync) as insp:
        tasks = insp.list_tasks("tq", TaskState.PENDING, page_size=1000)
    order: dict[int, list[int]] = {}
    for task in tasks:
        if task.payload is not None:
            order.setdefault(task.payload[0], []).append(task.payload[1])
    assert all(v == sorted(v) for v in order.values())  # each thread's tasks in its order
    assert len(tasks) == 40
