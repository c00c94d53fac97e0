"""One round trip per batch of tasks (issue 45, target 1): a busy worker's outcomes ride with its next
dequeue (the acknowledgement of the dequeued queue in the dequeue's own call, ``done_dequeue``), and a
process input's dequeue brings its process's record and page (no read of its own). Every guarantee
of the two separate calls holds: the same writes, a refused item leaves the others, a write that
meets an outage is retried by the writer, a call sent again after its first write is harmless."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import serving, stats, until

from asynqpy import AsyncClient, Client, Input, Inspector, Process, ServeMux, Step, Task
from asynqpy.core.model.codec import Message, decode
from asynqpy.core.model.errors import LeaseLostError, RedisUnavailableError, TaskNotFoundError
from asynqpy.core.processes import model as P
from asynqpy.core.spine.broker import Broker, Done
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import AsyncExecutor, SyncExecutor

Q = "rt"


def _counting(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], list[int]]:
    """Count the scripts the worker's executor sends, and its round trips (run / run_many)."""
    scripts: Counter[str] = Counter()
    trips = [0]
    run, run_many = AsyncExecutor.run, AsyncExecutor.run_many

    def name(c: Any) -> str:  # (a client's check that a process exists reads no events: not the worker's read)
        return "proc_read (client)" if c.script == "proc_read" and c.args[1] == 0 else c.script or c.command[0]

    async def counted_run(self: Any, call: Any) -> Any:
        scripts[name(call)] += 1
        trips[0] += 1
        return await run(self, call)

    async def counted_many(self: Any, calls: Any) -> Any:
        for c in calls:
            scripts[name(c)] += 1
        trips[0] += 1
        return await run_many(self, calls)

    monkeypatch.setattr(AsyncExecutor, "run", counted_run)
    monkeypatch.setattr(AsyncExecutor, "run_many", counted_many)
    return scripts, trips


def test_a_busy_worker_acknowledges_in_its_next_dequeue(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Draining a backlog, the successes ride with the next dequeue: most batches are acknowledged by
    done_dequeue, a done alone only when no dequeue follows (the queue ran dry, the slots full); every
    task runs once and is counted processed."""
    scripts, trips = _counting(monkeypatch)
    n = 300
    ran: Counter[int] = Counter()
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran[task.payload] += 1

    async def main() -> None:
        with Client(backend.sync) as c:
            c.enqueue_many([("t", i) for i in range(n)], queue=Q)
        async with serving(backend.new_async(), mux, queues=[Q], concurrency=10):
            await until(lambda: stats(backend, Q).processed == n, 30)

    asyncio.run(main())
    assert sorted(ran) == list(range(n)) and set(ran.values()) == {1}
    s = stats(backend, Q)
    assert (s.pending, s.active, s.processed) == (0, 0, n)
    assert scripts["done_dequeue"] > 5 * max(1, scripts["done"]), scripts
    assert scripts["done_dequeue"] + scripts["dequeue"] + scripts["done"] < n / 3, scripts  # batches, not tasks
    assert trips[0] < 0.8 * n / 10 * 2 + 60, (trips, scripts)  # ~one round trip a batch (two before), plus the chores'


def _mux() -> ServeMux:
    mux = ServeMux()

    @mux.process("acct", history=3)
    async def acct(p: Process, i: Input) -> Step:
        if i.kind == "init":
            return Step(state={"n": 0}, events=["init"])
        assert len(p.history) <= 3
        return Step(events=[i.args], state={"n": p.state["n"] + 1}, response=[e.data for e in p.history])

    return mux


def test_a_process_input_needs_no_read_of_its_own(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process input's dequeue reads its process (record and its type's page of history): the
    worker sends no proc_read, and the handler sees the same process as a read would give."""
    scripts, _ = _counting(monkeypatch)

    async def main() -> None:
        with Client(backend.sync) as c:
            for p in range(5):
                c.start_process("acct", f"a{p}", None, queue=Q)
        async with serving(backend.new_async(), _mux(), queues=[Q], concurrency=10):
            with Inspector(backend.sync) as insp:
                await until(lambda: all(insp.process(Q, f"a{p}").status == "running" for p in range(5)), 20)
            ac = AsyncClient(backend.new_async())
            got = [await ac.call_process(f"a{p % 5}", p, queue=Q, timeout=20) for p in range(10)]
            await ac.close()
        assert got[:5] == [["init"]] * 5 and got[5:] == [["init", p] for p in range(5)]
        with Inspector(backend.sync) as insp:
            assert [e.data for e in insp.process(Q, "a1").history] == ["init", 1, 6]

    asyncio.run(main())
    assert scripts["proc_read"] == 0, scripts


def test_the_dequeue_reads_the_page_proc_read_reads(backend: Any) -> None:
    """dequeue(pages=N): each process input comes with proc_read's reply for its process (its last N
    events); a plain task, and an input whose process is gone, as said; pages=-1 reads nothing."""
    r, b = backend.sync, Broker()
    x = SyncExecutor(r)
    with Client(r) as c:
        c.start_process("acct", "p1", None, queue=Q)
        c.start_process("acct", "gone", None, queue=Q)
        c.enqueue("t", 1, queue=Q)
    k = queue_keys(Q)
    hist = {f"p1:{i}": b"ev%d" % i for i in range(1, 8)}
    r.hset(k.hist, mapping=hist)
    from asynqpy.core.workflows.records import rec_pack, rec_unpack
    f = rec_unpack(r.hget(k.proc, "p1"))
    f[P.R_N] = b"7"
    r.hset(k.proc, "p1", rec_pack(f))
    r.hdel(k.proc, "gone")
    d = x.run(b.dequeue(Q, 10, 60_000, "tok00001", pages=3))
    types = {id: decode(v).type for id, v in d.tasks}
    inputs = {id for id, t in types.items() if t.startswith(P.TYPE_PREFIX)}
    assert len(d.tasks) == 3 and set(d.procs) == inputs
    by_pid = {pid: page for pid, page in d.procs.values()}
    assert by_pid["gone"] == []
    assert by_pid["p1"] == x.run(b.proc_read(Q, "p1", 0, 3)) == [r.hget(k.proc, "p1"), 5, b"ev5", b"ev6", b"ev7"]
    x.run(b.requeue(Q, next(iter(inputs)), "tok00001"))
    assert x.run(b.dequeue(Q, 10, 60_000, "tok00002")).procs == {}


def test_done_dequeue_is_done_then_dequeue(backend: Any) -> None:
    """The combined call acknowledges as done_many does (a refused item leaves the others), then
    dequeues with the slots it freed; sent again after its first write (a lost reply), the
    acknowledgement finds its tasks gone and writes nothing, and the dequeue takes what is left."""
    r, b = backend.sync, Broker()
    x = SyncExecutor(r)
    with Client(r) as c:
        for i in range(4):
            c.enqueue("t", i, queue=Q, task_id=f"t{i}")
    with Inspector(r) as insp:
        insp.set_limits(Q, concurrency=2)
    first = x.run(b.dequeue(Q, 4, 60_000, "tok00001"))
    assert [id for id, _ in first.tasks] == ["t0", "t1"]  # the concurrency limit: 2
    dones = [Done("t0", "tok00001", decode(first.tasks[0][1])), Done("t1", "tok0000X", decode(first.tasks[1][1]))]
    call = b.done_dequeue(Q, dones, 4, 60_000, "tok00002")
    acked, got = x.run(call)
    assert acked[0] == 1 and isinstance(acked[1], LeaseLostError)
    assert [id for id, _ in got.tasks] == ["t2"]  # t0's slot freed; t1 still active
    again_acked, again = x.run(b.done_dequeue(Q, dones[:1], 4, 60_000, "tok00003"))
    assert isinstance(again_acked[0], TaskNotFoundError) and again.tasks == []
    s = stats(backend, Q)
    assert (s.processed, s.active, s.pending) == (1, 2, 1)
    x.run(b.pause(Q))
    acked, paused = x.run(b.done_dequeue(Q, [Done("t2", "tok00002", decode(got.tasks[0][1]))], 4, 60_000, "tok4"))
    assert acked == [1] and paused.remaining == -1 and stats(backend, Q).processed == 2


def test_writes_riding_a_failed_dequeue_go_back_to_the_writer() -> None:
    """A dequeue carrying writes meets an outage: the dequeue's error is raised for the fetcher, and
    the writes go back to the writer's queue (attempt counted), sent by its loop once it may."""
    from asynqpy.worker.context import Running
    from asynqpy.worker.writer import Writer, _Write

    b = Broker()
    sent: list[list[str]] = []
    fail = [True]

    async def run_many(calls: Any) -> list[Any]:
        sent.append([c.script for c in calls])
        if fail[0]:
            raise RedisUnavailableError("injected")
        return [(1, SimpleNamespace()) if c.script == "done_dequeue" else 1 for c in calls]

    async def main() -> None:
        ctx = SimpleNamespace(exec=SimpleNamespace(run_many=run_many), broker=b,
                              metrics=SimpleNamespace(loop=lambda *a: None, enabled=False),
                              health=SimpleNamespace(failed=lambda *a: None, ok=lambda: None))
        held: dict[Any, Any] = {}
        w = Writer(ctx, SimpleNamespace(freeze_heap=False), held, set())  # type: ignore[arg-type]
        r = Running(Q, "a", "tok00001", Message("t"), None, asyncio.get_running_loop().time() + 60)
        held[(Q, "a")] = r
        w._queued.append(_Write(r, Done("a", "tok00001", Message("t"), progressed=False), "done"))
        batch = w.take()
        assert len(batch) == 1 and w.pending == 1 and not w._queued
        ride = (Q, lambda dones: b.done_dequeue(Q, dones, 5, 1000, "tok00002"), b.dequeue(Q, 5, 1000, "tok00002"))
        with pytest.raises(RedisUnavailableError):
            await w.write_with(batch, ride)
        assert sent == [["done_dequeue"]] and [x.attempts for x in w._queued] == [1] and held
        fail[0] = False
        loop = asyncio.create_task(w.run())
        await until(lambda: not held, 5)
        assert sent[-1] == ["done"] and w.pending == 0
        loop.cancel()

    asyncio.run(main())



@pytest.mark.real
@pytest.mark.parametrize("functions", [True, False], ids=["fcall", "evalsha"])
def test_an_idle_worker_gets_its_task_in_the_round_trip_that_wakes_it(
        redis_url: str, monkeypatch: pytest.MonkeyPatch, functions: bool) -> None:
    """An idle worker's dequeue rides with its BLPOP (worker/wake.py) and goes as the executor's calls
    go, FCALL or EVALSHA: it went as EVALSHA of a script Redis never cached while every other call
    went as FCALL, so each wake was a NOSCRIPT and a second round trip through the executor (idle
    pick-up p50 1.7 ms, not 1.2). After a FUNCTION FLUSH and a SCRIPT FLUSH the ride misses once,
    the executor runs the dequeue (loading it again), and the task is still taken."""
    import redis
    import redis.asyncio as aredis

    from asynqpy.redisio import executor
    from asynqpy.worker.wake import PipelinedWait

    monkeypatch.setattr(executor, "FUNCTIONS", functions)
    scripts, _ = _counting(monkeypatch)  # the executor's calls: a ride that missed goes through it
    r = redis.Redis.from_url(redis_url)
    broker = Broker()

    async def main() -> list[str]:
        ar = aredis.Redis.from_url(redis_url)
        ex = AsyncExecutor(ar)
        ctx = SimpleNamespace(redis=ar, exec=ex, block_limit=5.0)
        wait = PipelinedWait(ctx)  # type: ignore[arg-type]
        await ex.run(broker.dequeue(Q, 1, 30_000, "warm"))  # its function (or script) loaded: nothing to take
        took: list[str] = []
        with Client(redis_url) as c:
            for flush in (False, True):
                if flush:
                    r.function_flush()
                    r.script_flush()
                ids = [c.enqueue("t", i, queue=Q).id for i in range(2)]
                fired, res, _ = await wait.wait([queue_keys(Q).wake], 5.0, broker.dequeue(Q, 2, 30_000, "tok"))
                assert fired == queue_keys(Q).wake and res is not None
                assert sorted(i for i, _ in res.tasks) == sorted(ids)
                took += ids
                assert scripts["dequeue"] == 1 + flush, scripts  # the warm-up's; then the miss after the flush
        await wait.close()
        await ar.aclose()
        return took

    took = asyncio.run(main())
    assert len(took) == 4 and stats(SimpleNamespace(sync=r), Q).active == 4


@pytest.mark.real
@pytest.mark.parametrize("functions", [True, False], ids=["fcall", "evalsha"])
def test_no_script_call_is_refused_once_every_script_is_loaded(
        redis_url: str, monkeypatch: pytest.MonkeyPatch, functions: bool) -> None:
    """With every library (or script) loaded before a server starts, a worker's day — idle
    wake-ups, a busy drain acknowledged in its dequeues, a retry, a scheduled task — has no script
    call Redis refuses: a call that goes as the loaded form never does (the idle wait's dequeue
    went as EVALSHA while the rest went as FCALL: a NOSCRIPT at each wake-up, unseen but in
    INFO commandstats)."""
    import redis

    from asynqpy.redisio import executor
    from asynqpy.redisio.scripts import load_functions, load_scripts

    monkeypatch.setattr(executor, "FUNCTIONS", functions)
    r = redis.Redis.from_url(redis_url)
    if functions:
        load_functions(r)
    else:
        for s in load_scripts().values():
            r.script_load(s.source)
    ran: Counter[int] = Counter()
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran[task.payload] += 1
        if task.payload == -1 and task.retry_count == 0:
            raise RuntimeError("once")

    def refused() -> dict[str, tuple[int, int]]:
        got = r.info("commandstats")
        return {k: (v["failed_calls"], v["rejected_calls"]) for k, v in got.items()
                if k in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval")}

    def idle() -> bool:
        return any("b" in c["flags"] for c in r.client_list())

    async def main() -> None:
        r.config_resetstat()
        async with serving(redis_url, mux, queues=[Q]):
            with Client(redis_url) as c:
                for i in range(3):  # each to an idle worker
                    await until(idle)
                    c.enqueue("t", i, queue=Q)
                    await until(lambda: ran[i] == 1)
                c.enqueue_many([("t", i) for i in range(10, 210)], queue=Q)
                c.enqueue("t", -1, queue=Q, retry_delay=0.05)
                c.enqueue("t", -2, queue=Q, process_in=0.3)
                await until(lambda: len(ran) == 205 and ran[-1] == 2, 20)

    asyncio.run(main())
    assert not any(f or j for f, j in refused().values()), refused()


@pytest.mark.real
def test_a_slow_first_task_does_not_split_a_drain_into_half_batches(redis_url: str) -> None:
    """A worker draining no-op tasks refills its slots in one dequeue each time they all free,
    though its first task was slow (a sync handler, run in the thread pool): it kept two half
    batches in turn (one running while the other's dequeue was in flight), twice the script calls a
    task and half the drain's rate in bench/run.py, until the fetch gave the tasks it brought two
    turns of the loop to end (worker/fetcher.py ``_fetch_or_wait``). Counted in calls, not time."""
    import redis

    n, concurrency = 400, 10
    r = redis.Redis.from_url(redis_url)
    mux = ServeMux()
    done: list[int] = []

    @mux.handle("noop")
    async def noop(task: Task) -> None:
        done.append(task.payload)

    mux.handle("warmup", lambda task: None)  # (sync: the pool's thread, slower than the rest)

    async def main() -> None:
        with Client(redis_url) as c:
            c.enqueue("warmup", None, queue=Q)
            c.enqueue_many([("noop", i) for i in range(n)], queue=Q)
        r.config_resetstat()
        async with serving(redis_url, mux, queues=[Q], concurrency=concurrency):
            await until(lambda: len(done) == n)

    asyncio.run(main())
    calls = sum(v["calls"] for k, v in r.info("commandstats").items() if k in ("cmdstat_fcall", "cmdstat_evalsha"))
    assert calls <= 1.5 * n / concurrency, f"{calls} script calls for {n} tasks at concurrency {concurrency}"
