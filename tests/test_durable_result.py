"""A durable run's result is pushed, not polled (docs/durable.md "The client"):
``Client.result(run)`` registers the client's inbox with ``proc_watch`` and reads the run in one
round trip; the next commit of one of the run's inputs, or its archive, wakes it
(lua/proc_commit.lua and lua/archive.lua answer the inbox, the worker pushes a wake-up); a
wake-up lost (a worker killed between the commit and its push) is made good by the inbox's
recheck. On fakeredis, redis-server and the cluster; the async client and the sync one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import AsyncClient, Client, Durable, Inspector, RunFailedError, ServeMux
from asynqpy.core.spine.keys import queue_keys

Q = "dres"
K = queue_keys(Q)


def _mux() -> ServeMux:
    mux = ServeMux()

    @mux.durable(name="gated", queue=Q)
    async def gated(ctx: Durable, tag: str) -> dict[str, Any]:
        first = await ctx.wait_for("one")
        if first == "fail":
            raise ValueError("asked to fail")
        second = await ctx.wait_for("two")
        return {"tag": tag, "first": first, "second": second}

    return mux


def _count_reads(client: Any) -> list[str]:
    """The ids the client's broker builds proc_read calls for (each a read of the run)."""
    reads: list[str] = []
    real = client.broker.proc_read

    def counted(queue: str, pid: str, *args: Any, **kw: Any) -> Any:
        reads.append(pid)
        return real(queue, pid, *args, **kw)

    client.broker.proc_read = counted
    return reads


def _waiting(backend: Any, run_id: str) -> bool:
    with Inspector(backend.sync) as insp:
        return (insp.process(Q, run_id).state or {}).get("status") == "waiting"


def _watchers(backend: Any, run_id: str) -> int:
    got = backend.sync.hget(K.pwatch, run_id)
    return len(got.split()) if got else 0


def test_the_result_is_pushed_by_the_runs_commits_not_polled(backend: Any) -> None:
    async def main() -> None:
        ac = AsyncClient(backend.new_async(), recheck=120)  # (no recheck within the test: each read counted)
        reads = _count_reads(ac)
        async with serving(backend.new_async(), _mux(), queues=[Q]):
            run = await ac.start("gated", "a", id="gated:a", queue=Q)
            await until(lambda: _waiting(backend, run.id))
            waiter = asyncio.create_task(ac.result(run, timeout=30))
            await until(lambda: _watchers(backend, run.id) == 1)  # registered: it waits on its inbox
            assert reads == [run.id, run.id]  # the first read, then the registration's (one round trip)
            await ac.signal(run, "one", "x")  # commits of the run that do not end it: woken, it reads
            await until(lambda: len(reads) > 2 and _waiting(backend, run.id) and _watchers(backend, run.id) == 1)
            woken = len(reads)  # ... and waits again: two reads a wake-up (the loop's, the registration's)
            assert not waiter.done() and woken <= 8  # (the signal's input and the run's: a commit or two)
            await ac.signal(run, "two", "y")
            assert await waiter == {"tag": "a", "first": "x", "second": "y"}
        assert woken < len(reads) <= woken + 4  # woken again: the read that found the end
        assert _watchers(backend, run.id) == 0  # the commit that woke it took its entry
        await ac.close()

    asyncio.run(main())


def test_a_lost_wake_up_is_made_good_by_the_recheck_and_a_failure_is_raised(backend: Any) -> None:
    async def main() -> None:
        ac = AsyncClient(backend.new_async(), recheck=0.2)
        async with serving(backend.new_async(), _mux(), queues=[Q]):
            run = await ac.start("gated", "b", id="gated:b", queue=Q)
            await until(lambda: _waiting(backend, run.id))
            waiter = asyncio.create_task(ac.result(run, timeout=30))
            await until(lambda: _watchers(backend, run.id) == 1)
            backend.sync.hdel(K.pwatch, run.id)  # as if the worker died between the commit and the push
            await ac.signal(run, "one", "fail")
            with pytest.raises(RunFailedError, match="asked to fail"):
                await waiter
            with pytest.raises(TimeoutError, match="gated:c"):  # a run that does not end: the run's timeout
                run_c = await ac.start("gated", "c", id="gated:c", queue=Q)
                await ac.result(run_c, timeout=0.3)
        await ac.close()

    asyncio.run(main())


def test_the_sync_clients_result_waits_on_its_inbox_too(backend: Any) -> None:
    async def main() -> None:
        with Client(backend.sync, recheck=120) as c:
            reads = _count_reads(c)
            async with serving(backend.new_async(), _mux(), queues=[Q]):
                run = c.start("gated", "d", id="gated:d", queue=Q)
                await until(lambda: _waiting(backend, run.id))
                waiter = asyncio.create_task(asyncio.to_thread(c.result, run, timeout=30))
                await until(lambda: _watchers(backend, run.id) == 1)
                assert reads == [run.id, run.id]
                await asyncio.to_thread(c.signal, run, "one", 1)
                await until(lambda: len(reads) > 2 and _waiting(backend, run.id) and _watchers(backend, run.id) == 1)
                await asyncio.to_thread(c.signal, run, "two", 2)
                assert await waiter == {"tag": "d", "first": 1, "second": 2}
            assert len(reads) <= 12 and _watchers(backend, run.id) == 0

    asyncio.run(main())


def test_an_input_archived_for_good_wakes_its_runs_waiters(backend: Any) -> None:
    """A run's input whose last try failed (a lease that expired with the worker: the recoverer
    archives it, the process in error) wakes the clients waiting for the run, as a commit does
    (lua/archive.lua, includes/waiter woken): they learn "stopped in error" then, not at their
    next look."""
    from asynqpy.core.model.codec import decode
    from asynqpy.core.results.plans import RUN_WAITER, unpack_outcome, wake_calls
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac:
            run = await ac.start("gated", "e", id="gated:e", queue=Q, max_retry=0)
        b, x = Broker(), SyncExecutor(backend.sync)
        (iid, raw), = x.run(b.dequeue(Q, 1, 30_000, "tok00001")).tasks  # a worker takes the start, then dies
        assert x.run(b.proc_watch(Q, run.id, "inb1")) and x.run(b.proc_watch(Q, run.id, "inb2"))
        msg = decode(raw).with_(last_error="lease expired")
        res = x.run(b.archive(Q, iid, "tok00001", msg, 100, 3_600_000))
        assert set(res.watchers) == {"inb1", "inb2"} and res.process == run.id
        assert _watchers(backend, run.id) == 0
        x.run_many(wake_calls(b, Q, res))
        woke = unpack_outcome(Q, backend.sync.lpop(K.inbox("inb1")))
        assert woke is not None and woke.id == RUN_WAITER + run.id
        with Inspector(backend.sync) as insp:
            assert insp.process(Q, run.id).status == "error"
        with Client(backend.sync, recheck=120) as c, pytest.raises(RunFailedError, match="stopped in error"):
            c.result(run, timeout=10)

    asyncio.run(main())
