"""Durable functions, stage 2 (docs/durable.md, docs/internals-durable.md): a run goes on in the
same input after each step (its checkpoint, lua/proc_step.lua) and yields to the inputs that wait
for it; ``ctx.version``, ``ctx.continue_as_new`` and child runs (``ctx.child``), with the cancel
of a parent reaching its children. On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import serving, until

from asynqpy import (
    AsyncClient,
    Durable,
    DurableRun,
    Inspector,
    ProcessNotFoundError,
    RunFailedError,
    ServeMux,
    StepFailedError,
)

Q = "dq"


def _history(backend: Any, run: str) -> list[Any]:
    with Inspector(backend.sync) as insp:
        return list(insp.process(Q, run, first=1, count=1000).history)


def _status(backend: Any, run: str) -> Any:
    with Inspector(backend.sync) as insp:
        try:
            return (insp.process(Q, run).state or {}).get("status")
        except ProcessNotFoundError:
            return None


def test_steps_go_on_in_the_input_that_ran_the_first_one(backend: Any) -> None:
    mux = ServeMux()

    @mux.durable(name="many", queue=Q)
    async def many(ctx: Durable, n: int) -> int:
        total = 0
        for k in range(n):
            total += await ctx.step(f"s{k}", lambda k=k: k)
        return total

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac, serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(many, 20, id="m1")
            assert await ac.result(run, timeout=20) == sum(range(20))
        history = _history(backend, "m1")
        assert [e.data["k"] for e in history] == ["start"] + ["step"] * 20 + ["done"]
        assert {e.input for e in history} == {history[0].input}  # one input: the init ran every step

    asyncio.run(main())


def test_an_input_waiting_for_the_run_ends_the_one_running_its_steps(backend: Any) -> None:
    """A signal sent while a run goes step after step is taken between two steps (the running input
    ends at its next checkpoint, the signal's input runs, a continuation goes on)."""
    mux = ServeMux()
    gate = asyncio.Event()

    async def step(k: int) -> int:
        if k == 2:
            await gate.wait()
        return k

    @mux.durable(name="sig", queue=Q)
    async def sig(ctx: Durable) -> Any:
        for k in range(5):
            await ctx.step(f"s{k}", step, k)
        return await ctx.wait_for("go")

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac, serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(sig, id="g1")
            await until(lambda: len(_history(backend, "g1")) == 3, 10)  # start, s0, s1: s2 runs
            sent = asyncio.create_task(ac.signal(run, "go", 7))
            await asyncio.sleep(0.2)  # the signal's input waits behind the running one
            gate.set()
            assert await sent
            assert await ac.result(run, timeout=20) == 7
        kinds = [(e.data["k"], e.data.get("n")) for e in _history(backend, "g1")]
        assert kinds[:4] == [("start", None), ("step", "s0"), ("step", "s1"), ("step", "s2")]
        assert kinds[4] == ("signal", "go")  # taken right after s2, before s3
        assert kinds[-1] == ("done", None)

    asyncio.run(main())


def test_a_run_that_failed_reports_it(backend: Any) -> None:
    mux = ServeMux()

    @mux.durable(name="boom", queue=Q)
    async def boom(ctx: Durable) -> None:
        await ctx.step("a", lambda: 1)
        raise ValueError("no")

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac, serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(boom, id="b1")
            try:
                await ac.result(run, timeout=20)
                raise AssertionError("no failure")
            except RunFailedError as exc:
                assert exc.status == "failed" and "ValueError: no" in exc.error

    asyncio.run(main())


def test_version_takes_the_new_path_only_for_runs_that_had_not_passed_it(backend: Any) -> None:
    old, new = ServeMux(), ServeMux()
    ran: list[str] = []

    @old.durable(name="v", queue=Q)
    async def v_old(ctx: Durable) -> str:
        await ctx.step("a", lambda: ran.append("a"))
        await ctx.wait_for("go")
        await ctx.step("b", lambda: ran.append("b"))
        return "old"

    @new.durable(name="v", queue=Q)
    async def v_new(ctx: Durable) -> str:
        await ctx.step("a", lambda: ran.append("a"))
        if ctx.version("sms-first"):
            await ctx.step("sms", lambda: ran.append("sms"))
        await ctx.wait_for("go")
        if ctx.version("b-twice"):
            await ctx.step("b2", lambda: ran.append("b2"))
            return "new"
        await ctx.step("b", lambda: ran.append("b"))
        return "old"

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac:
            async with serving(backend.new_async(), old, queues=[Q]):
                passed = await ac.start("v", id="v1", queue=Q)  # passes 'sms-first' on the old code
                await until(lambda: ran == ["a"], 10)
            async with serving(backend.new_async(), new, queues=[Q]):
                fresh = await ac.start("v", id="v2", queue=Q)
                await until(lambda: ran == ["a", "a", "sms"], 10)
                for run in (passed, fresh):
                    assert await ac.signal(run, "go")
                # v1 had not reached 'b-twice': the new path there, the old one at 'sms-first'
                assert await ac.result(passed, timeout=20) == "new"
                assert await ac.result(fresh, timeout=20) == "new"
        assert sorted(ran) == ["a", "a", "b2", "b2", "sms"]
        kinds = [e.data["k"] for e in _history(backend, "v1")]
        assert kinds.count("version") == 1  # b-twice only

    asyncio.run(main())


def test_continue_as_new_starts_a_fresh_history_in_the_same_run(backend: Any) -> None:
    mux = ServeMux()
    ids: list[str] = []

    @mux.durable(name="loop", queue=Q)
    async def loop(ctx: Durable, n: int, total: int) -> Any:
        total += await ctx.step("add", lambda: (ids.append(ctx.step_id), n)[1])
        if n == 0:
            return [total, await ctx.wait_for("kept")]
        if n == 2:
            await ctx.wait_for("tick")
        ctx.continue_as_new(n - 1, total)

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac, serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(loop, 3, 0, id="c1")
            await until(lambda: len(ids) == 2, 10)
            assert await ac.signal(run, "kept", "x")  # not taken in this generation: carried over
            assert await ac.signal(run, "tick")
            assert await ac.result(run, timeout=20) == [6, "x"]
        assert ids == ["c1:1:add", "c1~1:1:add", "c1~2:1:add", "c1~3:1:add"]  # a step id per generation
        with Inspector(backend.sync) as insp:
            p = insp.process(Q, "c1", first=1, count=100)
        assert p.first_event > 1 and [e.data["k"] for e in p.history] == ["start", "signal", "step", "wait", "done"]

    asyncio.run(main())


def test_a_child_run_is_awaited_and_a_cancelled_parent_cancels_it(backend: Any) -> None:
    mux = ServeMux()
    ac = AsyncClient(backend.new_async())

    @mux.durable(name="kid", queue=Q, client=ac)
    async def kid(ctx: Durable, n: int) -> int:
        if n < 0:
            await ctx.wait_for("never")
        if n == 0:
            raise ValueError("zero")
        return int(await ctx.step("inc", lambda: n + 1))

    @mux.durable(name="parent", queue=Q, client=ac)
    async def parent(ctx: Durable, n: int) -> Any:
        try:
            got = await ctx.child(kid, n)
        except StepFailedError as exc:
            return f"kid failed: {exc.error}"
        return got * 2

    async def main() -> None:
        async with ac, serving(backend.new_async(), mux, queues=[Q]):
            assert await ac.result(await ac.start(parent, 3, id="p1"), timeout=20) == 8
            assert "ValueError: zero" in await ac.result(await ac.start(parent, 0, id="p0"), timeout=20)
            stuck = await ac.start(parent, -1, id="p2")
            await until(lambda: _status(backend, "p2:1:child") == "waiting", 10)
            assert await ac.cancel(stuck)
            try:
                await ac.result(DurableRun("p2:1:child", Q), timeout=20)
                raise AssertionError("the child was not cancelled")
            except RunFailedError as exc:
                assert exc.status == "cancelled" and "parent" in exc.error

    asyncio.run(main())


def test_a_signed_run_takes_no_unsigned_signal(backend: Any) -> None:
    """Signing: a worker with keys verifies every input of a run (a signal is an input, its message
    signed by its sender): a signal sent without the key never enters the run's history."""
    key = b"k" * 32
    mux = ServeMux()
    signed = AsyncClient(backend.new_async(), signing_key=key)

    @mux.durable(name="sig", queue=Q, client=signed)
    async def sig(ctx: Durable) -> Any:
        first = await ctx.wait_for("go")
        return [first, await ctx.task("echo", first, queue=Q)]

    @mux.handle("echo")
    async def echo(task: Any) -> Any:
        return task.payload

    async def main() -> None:
        async with signed, AsyncClient(backend.new_async()) as keyless, \
                serving(backend.new_async(), mux, queues=[Q], signing_key=key):
            run = await signed.start(sig, id="s1")
            await until(lambda: _status(backend, "s1") == "waiting", 10)
            try:
                await keyless.signal(run, "go", "forged", timeout=5)
            except Exception:  # noqa: BLE001 - refused (archived unrun: its signature)
                pass
            signals = [e.data for e in _history(backend, "s1") if e.data["k"] == "signal"]
            assert signals == []  # never entered
            with Inspector(backend.sync) as insp:
                await until(lambda: len(insp.list_tasks(Q, "archived")) == 1, 10)  # refused: archived unrun
                assert insp.process(Q, "s1").status == "running"  # the forged input did not break it
            assert await signed.signal(run, "go", "real")
            assert await signed.result(run, timeout=20) == ["real", "real"]

    asyncio.run(main())


def test_remove_process_deletes_a_run_and_its_checkpointed_history(backend: Any) -> None:
    mux = ServeMux()

    @mux.durable(name="rm", queue=Q)
    async def rm(ctx: Durable) -> None:
        for k in range(3):
            await ctx.step(f"s{k}", lambda: 1)
        await ctx.sleep(3600)

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac, serving(backend.new_async(), mux, queues=[Q]):
            await ac.start(rm, id="r1")
            await until(lambda: _status(backend, "r1") == "sleeping", 10)
            assert await ac.remove_process("r1", queue=Q, timeout=10)
        assert _status(backend, "r1") is None
        from asynqpy.core.spine.keys import queue_keys
        assert not [f for f in backend.sync.hkeys(queue_keys(Q).hist) if f.startswith(b"r1:")]

    asyncio.run(main())


def test_a_deploy_hold_on_a_functions_type_holds_its_runs_inputs(backend: Any) -> None:
    """Deploy holds: blocking ``process:durable.<name>`` holds every input of its runs (a sleeping
    run's timer too) until it is unblocked; nothing is lost."""
    mux = ServeMux()
    ran: list[str] = []

    @mux.durable(name="held", queue=Q)
    async def held(ctx: Durable) -> str:
        await ctx.step("a", lambda: ran.append("a"))
        await ctx.sleep(0.3)
        await ctx.step("b", lambda: ran.append("b"))
        return "ok"

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac, serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(held, id="h1")
            await until(lambda: _status(backend, "h1") == "sleeping", 10)
            with Inspector(backend.sync) as insp:
                insp.block_type(Q, "process:durable.held")
                await asyncio.sleep(0.8)  # the timer came due, held
                assert ran == ["a"] and _status(backend, "h1") == "sleeping"
                insp.unblock_type(Q, "process:durable.held")
            assert await ac.result(run, timeout=20) == "ok"
        assert ran == ["a", "b"]

    asyncio.run(main())
