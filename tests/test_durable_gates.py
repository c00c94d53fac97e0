"""Version gates on durable runs (issue 46: "version gates keep a run off older workers";
docs/durable.md, docs/deploy.md): a run started with ``min_worker_version`` (or of a function
declaring one) has every input carry the gate (its start, its continuations and timers, its
signals, its children's ends), so a worker older than the gate never advances it; a worker at or
above it does. On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import AsyncClient, Durable, Inspector, InvalidArgumentError, ProcessNotFoundError, ServeMux, TaskState

Q = "dg"


def _process(backend: Any, run: str) -> Any:
    with Inspector(backend.sync) as insp:
        try:
            return insp.process(Q, run)
        except ProcessNotFoundError:
            return None


def _status(backend: Any, run: str) -> Any:
    p = _process(backend, run)
    return None if p is None else (p.state or {}).get("status")


def _held(backend: Any) -> list[Any]:
    """The inputs of the queue set aside for a newer worker."""
    with Inspector(backend.sync) as insp:
        return [t for t in insp.list_tasks(Q, TaskState.SCHEDULED) if t.held]


def _mux(ran: list[str], **declared: Any) -> tuple[ServeMux, Any]:
    mux = ServeMux()

    @mux.durable(name="gated", queue=Q, **declared)
    async def gated(ctx: Durable, who: str) -> str:
        await ctx.step("a", lambda: ran.append("a"))
        ev = await ctx.wait_for("go", timeout=timedelta(seconds=30))
        await ctx.step("b", lambda: ran.append("b"))
        return f"{who}:{(ev or {}).get('plan')}"

    return mux, gated


def test_a_gated_run_is_not_started_by_an_older_worker(backend: Any) -> None:
    """Its init input waits (held for the version) while only older workers run; a worker of the
    gate's version takes it and the run completes."""
    ran: list[str] = []
    mux, gated = _mux(ran)

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac:
            run = await ac.start(gated, "u1", id="g1", min_worker_version="2.1")
            assert _process(backend, "g1").min_worker_version == "2.1.0"
            async with serving(backend.new_async(), mux, queues=[Q], version="2.0.9"):
                await until(lambda: len(_held(backend)) == 1, 10)
                await asyncio.sleep(0.3)
            held = _held(backend)
            assert [t.min_worker_version for t in held] == ["2.1.0"] and held[0].held == "version"
            assert ran == [] and _status(backend, "g1") is None  # its start never ran
            async with serving(backend.new_async(), mux, queues=[Q], version="2.1"):
                await until(lambda: _status(backend, "g1") == "waiting", 10)
                await ac.signal(run, "go", {"plan": "pro"}, timeout=10)
                assert await ac.result(run, timeout=20) == "u1:pro"
        assert ran == ["a", "b"]

    asyncio.run(main())


def test_a_gated_runs_signal_and_timer_wait_for_a_new_enough_worker(backend: Any) -> None:
    """A run a new worker took to its wait: with only older workers (one of no version too), its
    signal and its continuation are set aside, carrying the gate; the run does not move until a
    worker of the gate's version (or newer) is back."""
    ran: list[str] = []
    mux, gated = _mux(ran, min_worker_version="3")

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac:
            run = await ac.start(gated, "u2", id="g2")  # the function's declared gate
            async with serving(backend.new_async(), mux, queues=[Q], version="3.0"):
                await until(lambda: _status(backend, "g2") == "waiting", 10)
            p = _process(backend, "g2")
            assert ran == ["a"] and p.min_worker_version == "3.0.0" and p.timer_id  # the wait's deadline
            with Inspector(backend.sync) as insp:  # the timer the input set carries the gate too
                assert insp.task_info(Q, p.timer_id).min_worker_version == "3.0.0"
            async with serving(backend.new_async(), mux, queues=[Q], version="2.9"), \
                    serving(backend.new_async(), mux, queues=[Q]):
                with pytest.raises(TimeoutError):  # the run does not take it from these workers
                    await ac.signal(run, "go", {"plan": "team"}, timeout=1.0)
                await until(lambda: len(_held(backend)) == 1, 10)
                assert ran == ["a"] and _status(backend, "g2") == "waiting"
            assert [t.min_worker_version for t in _held(backend)] == ["3.0.0"]
            async with serving(backend.new_async(), mux, queues=[Q], version="3.1"):
                assert await ac.result(run, timeout=20) == "u2:team"
        assert ran == ["a", "b"]

    asyncio.run(main())


def test_a_runs_gate_is_the_runs_and_is_checked(backend: Any) -> None:
    """A declared gate is checked when declared; ``client.start``'s overrides it; an input naming
    another gate than its run's is refused (nothing sent)."""
    with pytest.raises(InvalidArgumentError):
        ServeMux().durable(name="bad", queue=Q, min_worker_version="2.x")(_body)
    mux = ServeMux()
    declared = mux.durable(name="decl", queue=Q, min_worker_version="1.5")(_body)

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac:
            await ac.start(declared, id="d1")
            await ac.start(declared, id="d2", min_worker_version="4.2.1")
            assert _process(backend, "d1").min_worker_version == "1.5.0"
            assert _process(backend, "d2").min_worker_version == "4.2.1"
            with pytest.raises(InvalidArgumentError, match="version gate it was started with"):
                await ac.call_process("d1", {"op": "signal", "name": "x"}, queue=Q, timeout=0,
                                      min_worker_version="9")
            with pytest.raises(TimeoutError):  # the same gate, written otherwise: taken
                await ac.call_process("d1", {"op": "signal", "name": "x"}, queue=Q, timeout=0,
                                      min_worker_version="1.5.0")
            with Inspector(backend.sync) as insp:
                sent = [t for t in insp.list_tasks(Q, TaskState.PENDING) + insp.list_tasks(Q, TaskState.BLOCKED)]
            assert sorted(t.min_worker_version for t in sent) == ["1.5.0", "1.5.0", "4.2.1"]

    asyncio.run(main())


async def _body(ctx: Durable) -> None:
    await ctx.sleep(1)
