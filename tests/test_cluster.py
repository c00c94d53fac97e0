"""The task lifecycle on a real 3-master Redis Cluster, through the public API only (plus the broker
to simulate a crashed worker).

Three queues are chosen so that their hash tags ``{queue}`` land on three different masters: every
test then exercises scripts, pipelines and blocking waits that span the whole cluster. Each test
runs its own event loop (``asyncio.run``) and an in-process :class:`Server` with small timings.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis

from asynqpy import (
    AsyncClient,
    Client,
    DuplicateTaskError,
    Inspector,
    LeaseLostError,
    ServeMux,
    Server,
    SkipRetry,
    TaskInfo,
    TaskNotFoundError,
    TaskState,
)
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

pytestmark = pytest.mark.cluster

# With `redis-cli --cluster create` on 3 masters the slot ranges are 0-5460, 5461-10922 and
# 10923-16383; these names' hash tags fall one in each (asserted against the live cluster below).
QUEUES = {"reports": 5152, "critical": 8090, "low": 15214}
Q1, Q2, Q3 = QUEUES
SERVER_OPTS: dict[str, Any] = dict(concurrency=5, lease=2, heartbeat_interval=0.5, shutdown_timeout=1)
TIMEOUT = 8.0


# -- fixtures and helpers ------------------------------------------------------------------------


async def wait_until(cond: Callable[[], Any], what: str, server_task: asyncio.Task[None] | None = None,
                     timeout: float = TIMEOUT) -> Any:
    """Poll ``cond`` (sync) until it returns something truthy; fail after ``timeout`` seconds or if
    the server task dies."""
    deadline = time.monotonic() + timeout
    while True:
        if server_task is not None and server_task.done():
            server_task.result()  # raises the server's exception, if any
            pytest.fail(f"server stopped while waiting for {what}")
        try:
            value = cond()
        except TaskNotFoundError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def serving(url: str, mux: ServeMux, queues: Any = None, **options: Any) -> AsyncIterator[asyncio.Task[None]]:
    """Run a Server on ``queues`` (default: the three test queues) for the duration of the block."""
    server = Server(url, queues=queues or {Q1: 1, Q2: 1, Q3: 1}, **{**SERVER_OPTS, **options})
    task = asyncio.create_task(server.arun(mux))
    try:
        yield task
    finally:
        server.stop()
        await asyncio.wait_for(task, 10)


def state_of(ins: Inspector, queue: str, id: str) -> TaskState:
    return ins.task_info(queue, id).state


async def wait_state(ins: Inspector, info: TaskInfo, state: TaskState, server_task: asyncio.Task[None]) -> None:
    await wait_until(lambda: state_of(ins, info.queue, info.id) is state,
                     f"task {info.id} in {info.queue} to be {state.value}", server_task)


# -- tests ---------------------------------------------------------------------------------------


def test_queues_live_on_three_different_masters(cluster_url: str) -> None:
    client = Client(cluster_url)
    try:
        rc = client.redis
        masters = {n.name for n in rc.get_primaries()}
        assert len(masters) == 3
        owners = {}
        for q, slot in QUEUES.items():
            k = queue_keys(q)
            assert rc.cluster_keyslot(k.tasks) == slot  # CLUSTER KEYSLOT, asked of the server
            for key in (k.pending, k.lease, k.scheduled, k.completed, k.wake, k.lock("x")):
                assert rc.cluster_keyslot(key) == slot  # the hash tag keeps the queue in one slot
            owners[q] = rc.get_node_from_key(k.tasks).name
        assert set(owners.values()) == masters  # one queue per master

        infos = {q: client.enqueue("probe", q, queue=q) for q in QUEUES}
        # The task data physically lives on the queue's master and nowhere else.
        for q in QUEUES:
            for name in masters:
                host, port = name.rsplit(":", 1)
                node = redis.Redis(host=host, port=int(port))
                here = node.hget(queue_keys(q).tasks, infos[q].id) if name == owners[q] else None
                assert (here is not None) == (name == owners[q])
                node.close()
    finally:
        client.close()


def test_enqueue_schedule_and_complete_with_result(cluster_url: str) -> None:
    ins = Inspector(cluster_url)
    seen: dict[str, float] = {}

    async def main() -> None:
        mux = ServeMux()

        @mux.handle("work")
        async def work(task: Any) -> None:
            seen[task.id] = time.monotonic()
            task.write_result({"double": task.payload["n"] * 2, "queue": task.queue})

        async with AsyncClient(cluster_url) as ac:
            with Client(cluster_url) as c:
                now_infos = [c.enqueue("work", {"n": i}, queue=q, retention=60) for i, q in enumerate(QUEUES)]
            t0 = time.monotonic()
            later = [await ac.enqueue("work", {"n": 10 + i}, queue=q, retention=60, process_in=0.6)
                     for i, q in enumerate(QUEUES)]
        for info in now_infos:
            assert info.state is TaskState.PENDING
            assert state_of(ins, info.queue, info.id) is TaskState.PENDING
        for info in later:
            assert info.state is TaskState.SCHEDULED
            stored = ins.task_info(info.queue, info.id)
            assert stored.state is TaskState.SCHEDULED and stored.next_process_at is not None
        assert [ins.stats(q).scheduled for q in QUEUES] == [1, 1, 1]

        async with serving(cluster_url, mux) as srv:
            for info in now_infos + later:
                await wait_state(ins, info, TaskState.COMPLETED, srv)
        for info in later:
            assert seen[info.id] - t0 >= 0.5, "a scheduled task ran before it was due"
        for info in now_infos + later:
            done = ins.task_info(info.queue, info.id)
            assert done.result == {"double": info.payload["n"] * 2, "queue": info.queue}
            assert done.completed_at is not None and done.retried == 0
        for q in QUEUES:
            s = ins.stats(q)
            assert (s.pending, s.active, s.scheduled, s.completed, s.processed, s.failed) == (0, 0, 0, 2, 2, 0)

    try:
        asyncio.run(main())
    finally:
        ins.close()


def test_retry_then_success(cluster_url: str) -> None:
    ins = Inspector(cluster_url)
    attempts: dict[str, int] = {}

    async def main() -> None:
        mux = ServeMux()

        @mux.handle("flaky")
        def flaky(task: Any) -> str:  # a sync handler: runs on the server's thread pool
            attempts[task.id] = attempts.get(task.id, 0) + 1
            if task.retry_count == 0:
                raise RuntimeError("transient failure")
            task.write_result(task.retry_count)
            return "ok"

        with Client(cluster_url) as c:
            infos = [c.enqueue("flaky", q, queue=q, retry_delay=0.2, retention=60) for q in QUEUES]
        async with serving(cluster_url, mux) as srv:
            for info in infos:
                await wait_state(ins, info, TaskState.COMPLETED, srv)
        for info in infos:
            done = ins.task_info(info.queue, info.id)
            assert attempts[info.id] == 2
            assert done.retried == 1 and done.result == 1
            assert "RuntimeError: transient failure" in done.last_error and done.last_failed_at is not None
            s = ins.stats(info.queue)
            assert (s.processed, s.failed, s.retry, s.completed) == (2, 1, 0, 1)

    try:
        asyncio.run(main())
    finally:
        ins.close()


def test_archive_on_skip_retry_and_no_retries_left(cluster_url: str) -> None:
    ins = Inspector(cluster_url)
    runs: list[str] = []

    async def main() -> None:
        mux = ServeMux()

        @mux.handle("skip")
        async def skip(task: Any) -> None:
            runs.append(task.id)
            raise SkipRetry("bad input, do not retry")

        @mux.handle("fail")
        async def fail(task: Any) -> None:
            runs.append(task.id)
            raise ValueError("always fails")

        async with AsyncClient(cluster_url) as ac:
            skipped = [await ac.enqueue("skip", q, queue=q, max_retry=5) for q in QUEUES]
            exhausted = [await ac.enqueue("fail", q, queue=q, max_retry=0) for q in QUEUES]
        async with serving(cluster_url, mux) as srv:
            for info in skipped + exhausted:
                await wait_state(ins, info, TaskState.ARCHIVED, srv)
        assert sorted(runs) == sorted(i.id for i in skipped + exhausted)  # one attempt each
        for info in skipped:
            assert "SkipRetry: bad input" in ins.task_info(info.queue, info.id).last_error
        for info in exhausted:
            archived = ins.task_info(info.queue, info.id)
            assert "ValueError: always fails" in archived.last_error and archived.retried == 0
        for q in QUEUES:
            s = ins.stats(q)
            assert (s.archived, s.pending, s.retry, s.processed, s.failed) == (2, 0, 0, 2, 2)

    try:
        asyncio.run(main())
    finally:
        ins.close()


def test_unique_duplicate_rejected(cluster_url: str) -> None:
    with Client(cluster_url) as c:
        firsts = [c.enqueue("report", {"day": "2024-01-01"}, queue=q, unique=60) for q in QUEUES]
        assert len({i.id for i in firsts}) == 3  # the lock is per queue: one per queue is allowed
        for q in QUEUES:
            with pytest.raises(DuplicateTaskError):
                c.enqueue("report", {"day": "2024-01-01"}, queue=q, unique=60)
            c.enqueue("report", {"day": "2024-01-02"}, queue=q, unique=60)  # another payload: fine
        # In a pipelined batch, duplicates fail alone.
        out = c.enqueue_many([("report", {"day": "2024-01-01"}, {"queue": q}) for q in QUEUES]
                             + [("report", {"day": "2024-01-03"}, {"queue": Q2})],
                             unique=60, return_exceptions=True)
        assert [type(x) for x in out[:3]] == [DuplicateTaskError] * 3
        assert out[3].state is TaskState.PENDING

    async def main() -> None:
        async with AsyncClient(cluster_url) as ac:
            for q in QUEUES:
                with pytest.raises(DuplicateTaskError):
                    await ac.enqueue("report", {"day": "2024-01-01"}, queue=q, unique=60)
            with pytest.raises(DuplicateTaskError):
                await ac.enqueue_many([("report", {"day": "2024-01-02"}, {"queue": Q3})], unique=60)

    asyncio.run(main())
    ins = Inspector(cluster_url)
    try:
        assert [ins.stats(q).pending for q in QUEUES] == [2, 3, 2]
    finally:
        ins.close()


def test_enqueue_many_pipelined_across_three_masters(cluster_url: str) -> None:
    ins = Inspector(cluster_url)
    done: list[tuple[str, int]] = []

    async def main() -> None:
        mux = ServeMux()

        @mux.handle("batch:")
        async def batch(task: Any) -> None:
            done.append((task.queue, task.payload))

        names = list(QUEUES)
        with Client(cluster_url) as c:
            sync_infos = c.enqueue_many([("batch:sync", i, {"queue": names[i % 3]}) for i in range(30)])
        async with AsyncClient(cluster_url) as ac:
            async_infos = await ac.enqueue_many(
                [("batch:async", 100 + i, {"queue": names[i % 3]}) for i in range(30)]
                + [("batch:later", 200 + i, {"queue": names[i % 3], "process_in": 0.3}) for i in range(3)]
            )
        assert len(sync_infos) == 30 and len(async_infos) == 33
        assert len({i.id for i in sync_infos + async_infos}) == 63
        assert [i.queue for i in sync_infos[:3]] == names
        assert sorted(ins.queues()) == sorted(names)
        for q in names:
            s = ins.stats(q)
            assert (s.pending, s.scheduled) == (20, 1)
        assert sum(s.size for s in ins.all_stats()) == 63

        async with serving(cluster_url, mux) as srv:
            await wait_until(lambda: len(done) == 63, "all 63 batch tasks to run", srv)
            await wait_until(lambda: all(s.processed == 21 for s in ins.all_stats()),
                             "the processed counters", srv)
        expected = {(names[i % 3], i) for i in range(30)} | {(names[i % 3], 100 + i) for i in range(30)}
        expected |= {(names[i % 3], 200 + i) for i in range(3)}
        assert sorted(done) == sorted(expected)
        for s in ins.all_stats():
            assert (s.size, s.processed, s.failed) == (0, 21, 0)

    try:
        asyncio.run(main())
    finally:
        ins.close()


def test_pause_and_unpause(cluster_url: str) -> None:
    ins = Inspector(cluster_url)
    done: list[str] = []

    async def main() -> None:
        mux = ServeMux()

        @mux.handle("p")
        async def handle(task: Any) -> None:
            done.append(task.queue)

        async with AsyncClient(cluster_url) as ac:
            assert await ac.pause(Q2) is True
            assert await ac.pause(Q2) is False  # already paused
            await ac.enqueue_many([("p", i, {"queue": q}) for q in QUEUES for i in range(3) if q != Q1 or i == 0])
        assert ins.pause(Q3) is True  # the Inspector knows Q3 now (the enqueue registered it)
        assert ins.pause(Q3) is False
        assert [ins.stats(q).paused for q in QUEUES] == [False, True, True]

        async with serving(cluster_url, mux) as srv:
            await wait_until(lambda: done == [Q1], "the unpaused queue's task", srv)
            await asyncio.sleep(0.3)  # paused queues must stay untouched while the server runs
            assert done == [Q1]
            assert [(ins.stats(q).pending, ins.stats(q).active) for q in (Q2, Q3)] == [(3, 0), (3, 0)]

            with Client(cluster_url) as c:
                assert c.unpause(Q2) is True
                assert c.unpause(Q2) is False
            await wait_until(lambda: done.count(Q2) == 3, f"{Q2}'s tasks after unpause", srv)
            assert Q3 not in done
            assert ins.unpause(Q3) is True
            await wait_until(lambda: done.count(Q3) == 3, f"{Q3}'s tasks after unpause", srv)
        assert [ins.stats(q).paused for q in QUEUES] == [False, False, False]
        assert [ins.stats(q).processed for q in QUEUES] == [1, 3, 3]

    try:
        asyncio.run(main())
    finally:
        ins.close()


def test_recoverer_retries_a_crashed_workers_task(cluster_url: str) -> None:
    ins = Inspector(cluster_url)
    seen: list[tuple[str, str, int]] = []

    async def main() -> None:
        mux = ServeMux()

        @mux.handle("job")
        async def job(task: Any) -> None:
            seen.append((task.queue, task.id, task.retry_count))

        with Client(cluster_url) as c:
            infos = [c.enqueue("job", q, queue=q, retention=60) for q in QUEUES]
            # A worker takes each task with a 500 ms lease, then "crashes": it never finishes it.
            for info in infos:
                res = SyncExecutor(c.redis).run(Broker().dequeue(info.queue, 1, 500, "tok00001"))
                assert [id for id, _ in res.tasks] == [info.id]
        for info in infos:
            assert state_of(ins, info.queue, info.id) is TaskState.ACTIVE
            assert ins.stats(info.queue).active == 1

        t0 = time.monotonic()
        async with serving(cluster_url, mux) as srv:
            for info in infos:
                await wait_state(ins, info, TaskState.COMPLETED, srv)
        assert time.monotonic() - t0 < 5
        assert sorted(seen) == sorted((i.queue, i.id, 1) for i in infos)  # ran once more, as a retry
        for info in infos:
            done = ins.task_info(info.queue, info.id)
            assert done.retried == 1
            assert "lease expired" in done.last_error
            s = ins.stats(info.queue)
            assert (s.active, s.retry, s.pending, s.completed, s.failed, s.processed) == (0, 0, 0, 1, 1, 2)

        # The crashed worker coming back cannot overwrite the outcome.
        with Client(cluster_url) as c:
            for info in infos:
                with pytest.raises((LeaseLostError, TaskNotFoundError)):
                    msg = _message_of(info)
                    SyncExecutor(c.redis).run(Broker().done(info.queue, info.id, "tok00001", msg))
        for info in infos:
            assert state_of(ins, info.queue, info.id) is TaskState.COMPLETED

    try:
        asyncio.run(main())
    finally:
        ins.close()


def _message_of(info: Any) -> Any:
    from asynqpy.core.model.codec import Message

    return Message(info.type, info.payload)


def test_inspector_on_three_masters_and_cancel(cluster_url: str) -> None:
    """queue_info, listing, bulk operations and cancel, each queue on its own master; the cancel
    notice (PUBLISH inside the script) reaches the worker through the cluster's pub/sub."""
    ins = Inspector(cluster_url)
    started: list[str] = []
    cancelled = asyncio.Event()

    async def main() -> None:
        mux = ServeMux()

        @mux.handle("long")
        async def long(task: Any) -> None:
            started.append(task.id)
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        with Client(cluster_url) as c:
            c.enqueue_many([("t", i, {"queue": q}) for q in QUEUES for i in range(30)])
            c.enqueue_many([("t", i, {"queue": q, "process_in": 60}) for q in QUEUES for i in range(5)])
            victim = c.enqueue("long", queue=Q3)
        infos = {i.queue: i for i in ins.all_queue_info()}
        assert [(infos[q].pending, infos[q].scheduled) for q in QUEUES] == [(30, 5), (30, 5), (31, 5)]
        assert all(i.memory_bytes for i in infos.values())
        assert [len(ins.list_tasks(q, "pending", page=2, page_size=20)) for q in QUEUES] == [10, 10, 11]
        assert [ins.archive_all(q, "pending") for q in (Q1, Q2)] == [30, 30]
        assert [ins.run_all(q, "archived") for q in (Q1, Q2)] == [30, 30]
        assert [ins.delete_all(q, "scheduled") for q in QUEUES] == [5, 5, 5]
        ins.delete_task(Q3, ins.list_tasks(Q3, "pending", page_size=1)[0].id)
        async with serving(cluster_url, mux, queues={Q3: 1}, heartbeat_interval=3, lease=10) as srv:
            await wait_until(lambda: victim.id in started, "the long task to start", srv)
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            info = await asyncio.to_thread(ins.cancel, victim.id)
            assert info.state is TaskState.ARCHIVED and info.last_error == "cancelled by an operator"
            await asyncio.wait_for(cancelled.wait(), 5)
            assert time.monotonic() - t0 < 1.0  # the notice, not the next lease renewal (3 s)
            await wait_until(lambda: ins.queue_info(Q3).pending == 0, "the rest of Q3", srv)
        assert state_of(ins, Q3, victim.id) is TaskState.ARCHIVED

    try:
        asyncio.run(main())
    finally:
        ins.close()


def test_cli_on_the_cluster(cluster_url: str) -> None:
    import json

    from click.testing import CliRunner

    from asynqpy.cli.main import main

    def run(*args: str) -> tuple[int, str]:
        res = CliRunner().invoke(main, [*args, "--redis-url", cluster_url])
        return res.exit_code, res.stdout

    for q in QUEUES:
        code, out = run("enqueue", "report", "--payload", '{"n": 1}', "--queue", q)
        assert code == 0 and f"{q}: pending" in out
    code, out = run("enqueue", "later", "--in", "60", "--queue", Q3)
    assert code == 0 and "scheduled (due" in out
    code, out = run("stats", "--json")
    rows = {r["queue"]: r for r in json.loads(out)}
    assert [(rows[q]["pending"], rows[q]["scheduled"]) for q in QUEUES] == [(1, 0), (1, 0), (1, 1)]


@pytest.mark.cluster
def test_many_first_commands_at_once_on_a_fresh_cluster_client(cluster_url: str) -> None:
    """redis-py's asyncio RedisCluster, sent its first commands by many coroutines at once, lets
    each load the topology and disconnect connections others write on ('NoneType' object has no
    attribute 'writelines'): the executor initializes it once, the others waiting."""
    from asynqpy.core.limits.plans import acquire_call
    from asynqpy.redisio.connection import async_client
    from asynqpy.redisio.executor import AsyncExecutor

    async def main() -> list[Any]:
        client = async_client(cluster_url)
        ex = AsyncExecutor(client)
        try:
            return await asyncio.gather(*(ex.run(acquire_call(f"n{i}", None, 1, 5, f"h{i}", 1000))
                                          for i in range(30)), return_exceptions=True)
        finally:
            await client.aclose()

    for _ in range(3):
        assert [r for r in asyncio.run(main()) if isinstance(r, Exception)] == []
