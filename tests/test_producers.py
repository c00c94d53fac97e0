"""AsyncClient.enqueue from many coroutines at once: their enqueues share pipelined round trips
(one connection), each still gets its own TaskInfo or typed error, and one coroutine's tasks stay
in order. On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
from typing import Any

from asynqpy import AsyncClient, Inspector, TaskIdConflictError, TaskState


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
