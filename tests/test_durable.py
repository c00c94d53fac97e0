"""Durable functions (docs/durable.md), stage 1: steps recorded once and replayed, retries and a
step's final failure caught in the function, durable sleeps (no worker held), signals sent
before and after the wait, a wait's timeout, deterministic now/uuid/random, the determinism check
(a run whose code no longer matches its history stops in error, nothing run), idempotent start,
cancel. On fakeredis, redis-server and the cluster (the crash tests: tests/test_durable_crash.py)."""

from __future__ import annotations

import asyncio
import time
import types
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from helpers import serving, stats, until

from asynqpy import (
    AsyncClient,
    Client,
    DeterminismError,
    Durable,
    DurableRun,
    Inspector,
    InvalidArgumentError,
    Retry,
    RunFailedError,
    ServeMux,
    StepFailedError,
    Task,
    TaskFailedError,
)
from asynqpy.core.durable.plans import ERROR_CHARS
from asynqpy.core.processes.model import Step, plan_step
from asynqpy.core.spine.keys import queue_keys

Q = "dq"


class Calls:
    """What the steps did (each call of a step body), in order."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def count(self, name: str) -> int:
        return self.log.count(name)


def onboard_mux(calls: Calls) -> ServeMux:
    mux = ServeMux()

    def load(uid: str) -> dict[str, str]:
        calls.log.append("load")
        return {"email": f"{uid}@example.com"}

    async def welcome(email: str) -> str:
        calls.log.append("welcome")
        return f"sent to {email}"

    @mux.durable(name="onboard", queue=Q)
    async def onboard(ctx: Durable, uid: str) -> dict[str, Any]:
        user = await ctx.step("load", load, uid)
        sent = await ctx.step("welcome", welcome, user["email"])
        ev = await ctx.wait_for("activated", timeout=timedelta(seconds=30))
        await ctx.sleep(0.2)
        return {"user": user, "sent": sent, "ev": ev}

    return mux


def test_steps_run_once_and_the_run_resumes_on_a_signal_sent_after_the_wait(backend: Any) -> None:
    calls = Calls()
    mux = onboard_mux(calls)

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start("onboard", "u1", id="onboard:u1", queue=Q)
            assert run == DurableRun("onboard:u1", Q, "onboard", True)
            with Inspector(backend.sync) as insp:
                await until(lambda: (insp.process(Q, run.id).state or {}).get("status") == "waiting")
                s = stats(backend, Q)
                assert s.active == 0 and s.pending == 0  # a waiting run holds no worker
            assert await ac.signal(run, "activated", {"plan": "pro"}) is True
            got = await ac.result(run, timeout=20)
        assert got == {"user": {"email": "u1@example.com"}, "sent": "sent to u1@example.com", "ev": {"plan": "pro"}}
        assert calls.log == ["load", "welcome"]  # each once, though the function ran again on every input
        with Inspector(backend.sync) as insp:
            p = insp.process(Q, run.id, first=1, count=100)
        kinds = [e.data["k"] for e in p.history]
        assert kinds == ["start", "step", "step", "wait", "signal", "sleep", "fired", "done"]
        assert p.state["status"] == "completed" and p.timer is not None  # its retention's (7 days): it removes it
        # 7 days from the run's end as its worker saw it (a timer is a time, not a delay counted when the commit ran)
        assert abs(p.timer - p.updated - timedelta(days=7)) < timedelta(seconds=5)  # (the worker's reckoning of Redis's time)
        await ac.close()

    asyncio.run(main())


def test_a_signal_sent_before_the_wait_is_kept_and_each_taken_once(backend: Any) -> None:
    mux = ServeMux()
    seen: list[Any] = []

    @mux.durable(name="collect", queue=Q)
    async def collect(ctx: Durable) -> list[Any]:
        await ctx.sleep(0.5)  # the signals arrive meanwhile
        got = [await ctx.wait_for("item"), await ctx.wait_for("item")]
        seen.append(got)
        return got + [await ctx.wait_for("item", timeout=0.2)]  # none left: None after the timeout

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(collect, id="c1")
            assert await ac.signal(run, "item", 1) is True
            assert await ac.signal(run.id, "item", 2, queue=Q) is True
            assert await ac.result(run, timeout=20) == [1, 2, None]
            assert await ac.signal(run, "item", 3) is False  # finished: nothing more is taken
        await ac.close()

    asyncio.run(main())


def test_a_wait_times_out_with_none_and_a_late_signal_goes_to_the_next_wait(backend: Any) -> None:
    mux = ServeMux()

    @mux.durable(name="late", queue=Q)
    async def late(ctx: Durable) -> list[Any]:
        first = await ctx.wait_for("go", timeout=timedelta(milliseconds=200))
        second = await ctx.wait_for("go")
        return [first, second]

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(late, id="l1")
            with Inspector(backend.sync) as insp:
                await until(lambda: any(e.data["k"] == "fired" for e in insp.process(Q, run.id, count=50).history))
            await ac.signal(run, "go", "x")
            assert await ac.result(run, timeout=20) == [None, "x"]
        await ac.close()

    asyncio.run(main())


def test_a_sleep_holds_no_worker_and_resumes_on_its_timer(backend: Any) -> None:
    mux = ServeMux()
    calls = Calls()

    def mark(x: str) -> str:
        calls.log.append(x)
        return x

    @mux.durable(name="nap", queue=Q)
    async def nap(ctx: Durable) -> float:
        before = ctx.now()
        await ctx.step("a", mark, "a")
        await ctx.sleep(timedelta(seconds=1))
        await ctx.step("b", mark, "b")
        return (ctx.now() - before).total_seconds()

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q], concurrency=1):
            run = await ac.start(nap, id="n1")
            with Inspector(backend.sync) as insp:
                await until(lambda: (insp.process(Q, run.id).state or {}).get("status") == "sleeping")
                p = insp.process(Q, run.id)
                assert p.timer is not None and stats(backend, Q).active == 0 and stats(backend, Q).scheduled == 1
            waited = await ac.result(run, timeout=20)
        assert waited >= 1 and calls.log == ["a", "b"]
        await ac.close()

    asyncio.run(main())


def test_a_timer_fires_at_the_time_asked_not_after_the_commits_wait(backend: Any) -> None:
    # a step's timer is a time (plan_step), not a delay the commit's script adds to its own
    # "now": a commit that waits in the worker's batch (tens of ms under load) made a sleep_until
    # fire that much late (bench/durable.py --wake: every timer of a burst ~30 ms late)
    at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)  # (whole ms: as stored)
    at_ms = int(at.timestamp() * 1000)
    assert plan_step("p", "k", None, Step(timer=at), 1_000).timer_at == at_ms
    assert plan_step("p", "k", None, Step(timer=5), 1_000).timer_at == 6_000
    assert plan_step("p", "k", None, Step(timer=datetime(1960, 1, 1, tzinfo=timezone.utc)), 1_000).timer_at == 0
    mux = ServeMux()

    @mux.durable(name="until", queue=Q)
    async def until_then(ctx: Durable) -> None:
        await ctx.sleep_until(at)

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q], concurrency=1):
            run = await ac.start(until_then, id="u1")
            with Inspector(backend.sync) as insp:
                await until(lambda: (insp.process(Q, run.id).state or {}).get("status") == "sleeping")
                assert insp.process(Q, run.id).timer == at
            scheduled = backend.sync.zrange(queue_keys(Q).scheduled, 0, -1, withscores=True)
            assert [score for _, score in scheduled] == [at_ms]
        await ac.close()

    asyncio.run(main())


def test_a_run_keeps_redis_time_on_a_worker_whose_clock_is_off(backend: Any, monkeypatch: Any) -> None:
    # this host's clock an hour ahead of Redis's: a run's time is Redis's as its worker reckons it
    # (the clock its timers fire by), so a sleep of a second ends after a second, and ctx.now()
    # is Redis's time (by this host's own clock the timer was set an hour late)
    import asynqpy.core.durable.replay as replay_mod
    import asynqpy.core.model.clock as clock_mod
    ahead = types.SimpleNamespace(time=lambda: time.time() + 3600, monotonic=time.monotonic)
    monkeypatch.setattr(clock_mod, "time", ahead)
    monkeypatch.setattr(replay_mod, "time", ahead)
    mux = ServeMux()

    @mux.durable(name="skewed", queue=Q)
    async def skewed(ctx: Durable) -> list[float]:
        before = ctx.now()
        await ctx.sleep(1)
        return [(ctx.now() - before).total_seconds(), ctx.now().timestamp()]

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q], concurrency=1):
            run = await ac.start(skewed, id="s1")
            waited, then = await ac.result(run, timeout=15)
        assert 1 <= waited < 10 and abs(then - time.time()) < 60
        await ac.close()

    asyncio.run(main())


def test_retries_then_a_final_failure_the_function_catches(backend: Any) -> None:
    mux = ServeMux()
    attempts: list[str] = []

    def flaky(fail: int) -> str:
        attempts.append("flaky")
        if len(attempts) <= fail:
            raise ConnectionError(f"down {len(attempts)}")
        return "up"

    def broken() -> None:
        attempts.append("broken")
        raise ValueError("card declined")

    @mux.durable(name="pay", queue=Q)
    async def pay(ctx: Durable) -> list[str]:
        out = [await ctx.step("flaky", flaky, 2, retry=Retry(attempts=3, delay=0.05))]
        try:
            await ctx.step("charge", broken, retry=Retry(attempts=2, delay=0.05))
        except StepFailedError as exc:
            out.append(f"{exc.step}: {exc.error_type}: {exc.error}")
        return out

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(pay, id="p1")
            got = await ac.result(run, timeout=20)
        assert got == ["up", "charge: ValueError: ValueError: card declined"]
        assert attempts == ["flaky"] * 3 + ["broken"] * 2  # none after the final outcome was recorded
        with Inspector(backend.sync) as insp:
            tries = [e.data for e in insp.process(Q, run.id, first=1, count=100).history if e.data["k"] == "try"]
        assert [(t["n"], t["a"]) for t in tries] == [("flaky", 1), ("flaky", 2), ("charge", 1)]
        await ac.close()

    asyncio.run(main())


def test_now_uuid_random_and_step_id_are_the_same_on_every_replay(backend: Any) -> None:
    mux = ServeMux()
    ids: list[str] = []
    values: list[tuple[Any, ...]] = []

    @mux.durable(name="det", queue=Q)
    async def det(ctx: Durable) -> list[Any]:
        v = (ctx.now().isoformat(), ctx.uuid(), ctx.random())
        values.append(v)
        await ctx.step("one", lambda: ids.append(ctx.step_id))
        await ctx.sleep(0.05)
        await ctx.step("two", lambda: ids.append(ctx.step_id))
        return list(v)

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(det, id="d1")
            got = await ac.result(run, timeout=20)
        assert len(values) >= 2 and set(values) == {tuple(got)}  # every replay saw the recorded values
        assert ids == ["d1:4:one", "d1:6:two"]  # <run>:<position>:<name>
        await ac.close()

    asyncio.run(main())


def test_code_that_no_longer_matches_the_history_stops_in_error_before_running_and_a_repair_resumes_it(backend: Any) -> None:
    calls = Calls()
    old, new = ServeMux(), ServeMux()

    @old.durable(name="flow", queue=Q)
    async def flow_v1(ctx: Durable) -> str:
        await ctx.step("load", lambda: calls.log.append("load"))
        await ctx.wait_for("go")
        await ctx.step("ship", lambda: calls.log.append("ship"))
        return "v1"

    @new.durable(name="flow", queue=Q)
    async def flow_v2(ctx: Durable) -> str:
        await ctx.step("fetch", lambda: calls.log.append("fetch"))  # renamed: position 1 differs
        await ctx.wait_for("go")
        await ctx.step("ship", lambda: calls.log.append("ship"))
        return "v2"

    fixed = ServeMux()

    @fixed.durable(name="flow", queue=Q)
    async def flow_v3(ctx: Durable) -> str:
        await ctx.step("load", lambda: calls.log.append("load"))  # as recorded
        await ctx.wait_for("go")
        await ctx.step("ship", lambda: calls.log.append("ship"))
        return "v3"

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), old, queues=[Q]):
            run = await ac.start(flow_v1, id="f1")
            with Inspector(backend.sync) as insp:
                await until(lambda: (insp.process(Q, run.id).state or {}).get("status") == "waiting")
        async with serving(backend.new_async(), new, queues=[Q]):
            with pytest.raises(TaskFailedError, match="DeterminismError"):
                await ac.signal(run, "go", timeout=20)
            with pytest.raises(RunFailedError) as err:
                await ac.result(run, timeout=20)
        assert err.value.status == "stopped in error"
        assert "at position 1 the history holds step 'load' but the code now asks for step 'fetch'" in err.value.error
        assert calls.log == ["load"]  # neither fetch nor ship ran
        with Inspector(backend.sync) as insp:
            assert insp.process(Q, run.id).status == "error"
        async with serving(backend.new_async(), fixed, queues=[Q]):  # fix and resume: a repair replays on new code
            assert await ac.repair_process(run.id, queue=Q, timeout=20) is None
            assert await ac.signal(run, "go", timeout=20) is True  # (the one that met the bad code failed)
            assert await ac.result(run, timeout=20) == "v3"
        assert calls.log == ["load", "ship"]
        await ac.close()

    asyncio.run(main())
    assert issubclass(DeterminismError, Exception)


def test_start_is_idempotent_by_id_and_cancel_ends_a_run(backend: Any) -> None:
    mux = ServeMux()
    started: list[Any] = []

    @mux.durable(name="idem", queue=Q)
    async def idem(ctx: Durable, x: int) -> int:
        await ctx.step("note", lambda: started.append(x))
        await ctx.wait_for("never")
        return x

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        with Client(backend.sync) as c:
            first = c.start(idem, 1, id="i1")
            again = c.start(idem, 2, id="i1")  # sync facade too
            assert first.created and not again.created and again.id == "i1"
            async with serving(backend.new_async(), mux, queues=[Q]):
                with pytest.raises(TimeoutError):
                    await ac.result(first, timeout=0.5)
                await until(lambda: started)
                assert await ac.cancel(first) is True
                with pytest.raises(RunFailedError, match="cancelled"):
                    await ac.result(first, timeout=10)
                assert await ac.cancel(first) is False  # over already
            with pytest.raises(RunFailedError, match="cancelled"):
                c.result(first, timeout=10)  # the sync facade, after
        assert started == [1]
        await ac.close()

    asyncio.run(main())


def test_a_function_that_raises_fails_the_run_and_bad_inputs_are_typed_errors(backend: Any) -> None:
    mux = ServeMux()

    @mux.durable(name="boom", queue=Q)
    async def boom(ctx: Durable) -> None:
        await ctx.step("ok", lambda: 1)
        raise RuntimeError("bug in the function")

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(boom, id="b1")
            with pytest.raises(RunFailedError, match="failed: RuntimeError: bug in the function"):
                await ac.result(run, timeout=20)
        with pytest.raises(InvalidArgumentError):
            await ac.start(boom, object(), id="b2")  # not msgpack-able
        with pytest.raises(InvalidArgumentError):
            await ac.start(boom, id="")
        with pytest.raises(InvalidArgumentError):
            await ac.signal(run, "")
        with pytest.raises(InvalidArgumentError):
            await ac.result(run, queue="elsewhere")
        await ac.close()

    asyncio.run(main())
    with pytest.raises(InvalidArgumentError):
        ServeMux().durable(lambda ctx: None)  # not an async def
    with pytest.raises(InvalidArgumentError):
        Retry(attempts=0)


def test_gather_runs_new_steps_together_in_one_input_and_waits_for_signals_too(backend: Any) -> None:
    mux = ServeMux()
    calls = Calls()
    ids: list[str] = []

    def sync_part(x: int) -> int:
        calls.log.append("sync")
        ids.append(mux_ctx[0].step_id)
        return x * 2

    async def async_part(x: int) -> int:
        calls.log.append("async")
        ids.append(mux_ctx[0].step_id)
        await asyncio.sleep(0.01)
        return x + 1

    mux_ctx: list[Durable] = []

    @mux.durable(name="fan", queue=Q)
    async def fan(ctx: Durable, x: int) -> list[Any]:
        mux_ctx[:] = [ctx]
        a, b = await ctx.gather(ctx.step("double", sync_part, x), ctx.step("inc", async_part, x))
        ev, c = await ctx.gather(ctx.wait_for("go"), ctx.step("again", sync_part, a))
        try:
            await ctx.gather(ctx.step("ok", sync_part, 1), ctx.step("bad", _fail, retry=Retry(attempts=1)))
        except StepFailedError as exc:
            return [a, b, ev, c, exc.step]
        return []

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(fan, 5, id="g1")
            with Inspector(backend.sync) as insp:
                await until(lambda: (insp.process(Q, run.id).state or {}).get("status") == "waiting")
            await ac.signal(run, "go", "now")
            assert await ac.result(run, timeout=20) == [10, 6, "now", 20, "bad"]
            with pytest.raises(InvalidArgumentError):
                await Durable("x", [], 0).gather(asyncio.get_running_loop().create_future())  # not a ctx operation
        with Inspector(backend.sync) as insp:
            hist = insp.process(Q, run.id, first=1, count=100).history
        steps = {e.data["n"]: e.input for e in hist if e.data["k"] == "step"}
        assert steps["double"] == steps["inc"] and steps["ok"] == steps["bad"]  # recorded by one input each
        assert sorted(calls.log) == ["async", "sync", "sync", "sync"]  # each step once
        assert sorted(ids) == ["g1:1:double", "g1:2:inc", "g1:4:again", "g1:5:ok"]
        await ac.close()

    asyncio.run(main())


def _fail() -> None:
    raise KeyError("nope")


def test_two_ctx_operations_at_once_without_gather_fail_the_run(backend: Any) -> None:
    mux = ServeMux()

    async def slow() -> int:
        await asyncio.sleep(0.05)
        return 1

    @mux.durable(name="racy", queue=Q)
    async def racy(ctx: Durable) -> Any:
        return await asyncio.gather(ctx.step("a", slow), ctx.step("b", slow))

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(racy, id="r1")
            with pytest.raises(RunFailedError, match="one ctx operation at a time"):
                await ac.result(run, timeout=20)
        await ac.close()

    asyncio.run(main())


def test_a_run_of_many_steps_gives_its_tenant_turn_up_after_its_input_s_time(backend: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps that follow each other in one input share one turn, at most CONTINUE_S (here 0.2 s):
    a worker of one slot, a run of tenant acme with 40 steps of 20 ms (0.8 s of steps), a task of
    tenant beta enqueued once the run runs: the task runs while the run still has steps to go (its
    input ended after 0.2 s, its continuation queued behind beta's task), and the run still ends
    with every step once (checked against a run whose input never ends early: the task waits)."""
    from asynqpy.worker import runner

    mux = ServeMux()
    log: list[str] = []

    async def tick(k: int) -> int:
        await asyncio.sleep(0.02)
        log.append(f"s{k}")
        return k

    @mux.durable(name="long", queue=Q)
    async def long(ctx: Durable) -> int:
        return sum([await ctx.step(f"s{k}", tick, k) for k in range(40)])

    @mux.handle("beta-task")
    async def beta(task: Task) -> None:
        log.append("beta")

    async def main(run_id: str) -> tuple[int, int]:
        ac = AsyncClient(backend.new_async())
        with Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), mux, queues=[Q], concurrency=1):
                run = await ac.start(long, id=run_id, tenant="acme")
                await until(lambda: "s0" in log)
                await ac.enqueue("beta-task", None, queue=Q, tenant="beta")
                assert await ac.result(run, timeout=30) == sum(range(40))
                await until(lambda: "beta" in log)
            inputs = insp.process(Q, run.id, first=1, count=200).history
        await ac.close()
        steps = [x for x in log if x != "beta"]
        assert sorted(steps) == sorted(f"s{k}" for k in range(40)) and len(steps) == 40, steps  # each once
        return log.index("beta"), len({e.input for e in inputs})

    monkeypatch.setattr(runner, "CONTINUE_S", 0.2)
    beta_at, inputs = asyncio.run(main("turns"))
    assert beta_at < 40 and inputs > 1, (beta_at, inputs, log)  # beta's task ran between the run's steps
    log.clear()
    monkeypatch.setattr(runner, "CONTINUE_S", 60.0)
    beta_at, inputs = asyncio.run(main("no-turns"))
    assert beta_at == 40 and inputs == 1, (beta_at, inputs, log)  # one input: beta's task waited for the run


def test_a_history_past_the_cap_stops_the_run_in_error_and_continue_as_new_keeps_it_under(
        backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An input reads a run's whole history, at most MAX_HISTORY events (5 000; 12 here): a run
    whose history passed it when an input begins stops in error, saying so, and runs nothing more;
    the same work with ``ctx.continue_as_new`` every few steps keeps each history short and ends."""
    from asynqpy.core.durable import function

    monkeypatch.setattr(function, "MAX_HISTORY", 12)
    mux = ServeMux()
    ran: list[str] = []

    def work(k: int) -> int:
        ran.append(f"w{k}")
        return k

    @mux.durable(name="grows", queue=Q)
    async def grows(ctx: Durable) -> int:
        for k in range(20):
            await ctx.step(f"w{k}", work, k)
            if k % 5 == 4:
                await ctx.sleep(0.01)  # a new input: it reads the history whole
        return 20

    @mux.durable(name="renews", queue=Q)
    async def renews(ctx: Durable, start: int = 0) -> int:
        for k in range(start, min(start + 4, 20)):
            await ctx.step(f"w{k}", work, k)
        if start + 4 < 20:
            await ctx.sleep(0.01)
            ctx.continue_as_new(start + 4)
        return 20

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        async with serving(backend.new_async(), mux, queues=[Q]):
            run = await ac.start(grows, id="g1")
            with pytest.raises(RunFailedError) as err:
                await ac.result(run, timeout=20)
            assert err.value.status == "stopped in error" and "more than a run replays (12)" in err.value.error
            assert ran == [f"w{k}" for k in range(10)]  # the input that found 13+ events ran nothing
            ran.clear()
            assert await ac.result(await ac.start(renews, id="r1"), timeout=20) == 20
            assert ran == [f"w{k}" for k in range(20)]
        await ac.close()

    asyncio.run(main())


def test_a_run_of_a_tenant_takes_its_turns_under_the_tenants_pause(backend: Any) -> None:
    mux = ServeMux()
    calls = Calls()

    @mux.durable(name="tenanted", queue=Q)
    async def tenanted(ctx: Durable) -> str:
        await ctx.step("one", lambda: calls.log.append("one"))
        await ctx.sleep(1)  # its timer input is the tenant's too
        await ctx.step("two", lambda: calls.log.append("two"))
        return "ok"

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        with Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), mux, queues=[Q]):
                run = await ac.start(tenanted, id="t1", tenant="acme")
                await until(lambda: (insp.process(Q, run.id).state or {}).get("status") == "sleeping")
                insp.pause_tenant(Q, "acme")
                await asyncio.sleep(1.5)  # the timer falls due while its tenant is paused
                assert calls.log == ["one"] and insp.process(Q, run.id).state["status"] == "sleeping"
                insp.resume_tenant(Q, "acme")
                assert await ac.result(run, timeout=20) == "ok"
            p = insp.process(Q, run.id, first=1, count=100)
        assert p.tenant == "acme" and calls.log == ["one", "two"]
        assert {e.kind for e in p.history} == {"init", "timeout"}  # its start, then its timers: none other
        await ac.close()

    asyncio.run(main())


def test_ctx_task_enqueues_a_normal_task_once_and_awaits_its_result_holding_no_worker(backend: Any) -> None:

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        mux = ServeMux()
        ran: list[Any] = []

        @mux.handle("score")
        async def score(task: Task) -> int:
            ran.append(task.payload)
            await asyncio.sleep(0.3)
            return len(task.payload)

        @mux.handle("broken")
        async def broken(task: Task) -> None:
            raise ValueError("no " + "x" * 2000)  # (a long error: the run keeps its first 1 000 characters)

        @mux.durable(name="tasks", queue=Q, client=ac)
        async def tasks(ctx: Durable, word: str) -> list[Any]:
            n = await ctx.task("score", word, queue="other")
            m, k = await ctx.gather(ctx.task("score", word * 2, queue=Q), ctx.step("local", lambda: 7))
            try:
                await ctx.task("broken", None, max_retry=0)
            except StepFailedError as exc:
                return [n, m, k, exc.error]
            return []

        async with serving(backend.new_async(), mux, queues=[Q, "other", "default"]):
            run = await ac.start(tasks, "abc", id="t1")
            with Inspector(backend.sync) as insp:
                await until(lambda: (insp.process(Q, run.id).state or {}).get("status") == "waiting")
                active = [t.type for t in insp.list_tasks(Q, "active")]
                assert "process:durable.tasks" not in active  # the run waits for its task holding no worker
            got = await ac.result(run, timeout=20)
        # a failed task's StepFailedError names how it ended and its last error (cut to ERROR_CHARS)
        assert got[:3] == [3, 6, 7] and got[3].startswith("task t1:4:task ended archived: ValueError: no xxx")
        assert got[3].endswith("x…") and len(got[3]) == len("task t1:4:task ended archived: ") + ERROR_CHARS
        assert ran == ["abc", "abcabc"]  # each task once
        with pytest.raises(Exception, match="needs a client"):
            await Durable("x", [], 0).task("score", 1)
        await ac.close()

    asyncio.run(main())


def test_the_enqueue_of_a_ctx_task_run_again_after_a_crash_enqueues_nothing_new(backend: Any) -> None:
    from asynqpy.core.durable.tasks import NOTIFY, enqueue

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        for _ in range(2):  # the step's body run again (its worker died before the record)
            assert await enqueue(ac, "r9", Q, 3, "score", "x", {"queue": "other"}) == "r9:3:task"
        with Inspector(backend.sync) as insp:
            assert [t.id for t in insp.list_tasks("other", "pending")] == ["r9:3:task"]
            waiting = insp.list_tasks(Q, "waiting")
            assert [(t.id, t.type) for t in waiting] == [("r9:3:task:notify", NOTIFY)]
        await ac.close()

    asyncio.run(main())
