"""Signed durable runs (issue 46: "no step result or signal enters a signed run unverified";
docs/durable.md "Signing", core/durable/signed.py). With signing keys, a run's inputs are signed
messages (verified as any task: an unsigned signal is archived unrun) and every event a worker
writes into its history carries a tag bound to the queue, the run and the event's number. Here: a
signed run completes with every event tagged; a signal event forged straight into Redis, a step's
recorded result altered there, and an event moved to another position each stop the run in
``error`` before the replay sees them (its input archived with a ``bad signature`` error, an
``archived`` event on the stream), and no step after them runs; a signal sent without the key is
archived unrun and the run goes on. On fakeredis, redis-server and the Cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import AsyncClient, Durable, Inspector, RunFailedError, ServeMux, StepFailedError, TaskFailedError
from asynqpy.core.durable.tasks import NOTIFY
from asynqpy.core.model import codec
from asynqpy.core.processes import model as proc
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.workflows.records import rec_pack, rec_unpack

Q = "dsig"
KEY = b"k" * 32
K = queue_keys(Q)


def charge_mux(charged: list[int]) -> ServeMux:
    mux = ServeMux()

    def quote(order: str) -> dict[str, Any]:
        return {"order": order, "amount": 10}

    def charge(amount: int) -> int:
        charged.append(amount)
        return amount

    @mux.durable(name="charge", queue=Q)
    async def flow(ctx: Durable, order: str) -> Any:
        q = await ctx.step("quote", quote, order)
        ev = await ctx.wait_for("approved")
        paid = await ctx.step("charge", charge, q["amount"])
        return {"paid": paid, "by": ev}

    return mux


def record(backend: Any, rid: str) -> proc.Record:
    return proc.parse_record(rid, backend.sync.hget(K.proc, rid))


def forge_signal(backend: Any, rid: str) -> None:
    """Append a signal event to the run's history by hand (HSET, and the record's count)."""
    rec = record(backend, rid)
    n = rec.count + 1
    data = codec.encode_payload({"k": "signal", "n": "approved", "p": "forged"}, "event")
    backend.sync.hset(K.hist, f"{rid}:{n}", rec_pack([b"1700000000000", b"forger", b"call", data]))
    f = list(rec.fields)
    f[proc.R_N] = b"%d" % n
    backend.sync.hset(K.proc, rid, rec_pack(f))


def alter_step(backend: Any, rid: str) -> None:
    """Change the recorded result of step 'quote' in place (its tag kept)."""
    for field, raw in backend.sync.hgetall(K.hist).items():
        at, iid, kind, data = rec_unpack(raw)
        e = codec.decode_value(data)
        if field.decode().startswith(f"{rid}:") and e.get("k") == "step" and e.get("n") == "quote":
            e["v"]["amount"] = 10_000
            backend.sync.hset(K.hist, field, rec_pack([at, iid, kind, codec.encode_payload(e, "event")]))
            return
    raise AssertionError("no step 'quote' recorded")


def swap_events(backend: Any, rid: str) -> None:
    """Swap two of the run's events (each keeps its own tag, made for its own position)."""
    a, b = backend.sync.hmget(K.hist, [f"{rid}:1", f"{rid}:2"])
    backend.sync.hset(K.hist, mapping={f"{rid}:1": b, f"{rid}:2": a})


async def waiting(insp: Inspector, rid: str) -> None:
    await until(lambda: (insp.process(Q, rid).state or {}).get("status") == "waiting")


@pytest.mark.parametrize("forge", ["signal", "step_result", "moved"])
def test_a_forged_event_stops_a_signed_run_before_its_replay_sees_it(backend: Any, forge: str) -> None:
    charged: list[int] = []
    mux = charge_mux(charged)

    async def main() -> None:
        ac = AsyncClient(backend.new_async(), signing_key=KEY)
        with Inspector(backend.sync) as insp:
            insp.set_events(Q, 100)
            async with serving(backend.new_async(), mux, queues=[Q], signing_key=KEY):
                run = await ac.start("charge", "o1", id="charge:o1", queue=Q)
                await waiting(insp, run.id)
                {"signal": forge_signal, "step_result": alter_step, "moved": swap_events}[forge](backend, run.id)
                with pytest.raises(TaskFailedError, match="bad signature"):  # the input that met it failed
                    await ac.signal(run, "approved", "alice", timeout=20)
                with pytest.raises(RunFailedError) as err:
                    await ac.result(run, timeout=20)
            assert err.value.status == "stopped in error" and "bad signature" in err.value.error, err.value
            assert charged == []  # the step after the forged event never ran
            p = insp.process(Q, run.id, first=1, count=100)
            assert p.status == proc.ERROR and "durable run 'charge:o1'" in p.error
            archived = [e for e in insp.events(Q) if e.event == "archived"]
            assert [e.task_id for e in archived] == [p.broken_by] and "bad signature" in archived[0].error
        await ac.close()

    asyncio.run(main())


def test_a_signed_run_tags_every_event_and_refuses_an_unsigned_signal(backend: Any) -> None:
    charged: list[int] = []
    mux = charge_mux(charged)

    async def main() -> None:
        ac = AsyncClient(backend.new_async(), signing_key=KEY)
        keyless = AsyncClient(backend.new_async())
        with Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), mux, queues=[Q], signing_key=KEY):
                run = await ac.start("charge", "o2", id="charge:o2", queue=Q)
                await waiting(insp, run.id)
                with pytest.raises(TaskFailedError, match="bad signature"):  # archived unrun
                    await keyless.signal(run, "approved", "mallory", timeout=20)
                assert (insp.process(Q, run.id).state or {}).get("status") == "waiting"
                assert await ac.signal(run, "approved", "alice", timeout=20) is True
                got = await ac.result(run, timeout=20)
            assert got == {"paid": 10, "by": "alice"} and charged == [10]
            p = insp.process(Q, run.id, first=1, count=100)
            kinds = [e.data["k"] for e in p.history]
            assert kinds == ["start", "step", "wait", "signal", "step", "done"]
            assert all(isinstance(e.data.get("sig"), bytes) and len(e.data["sig"]) == 32 for e in p.history)
        await ac.close()
        await keyless.close()

    asyncio.run(main())


def _signed_task_run(backend: Any, handler: Any, state: bytes, alter: tuple[bytes, bytes] | None) -> tuple[Any, str]:
    """A signed run whose one ctx.task (type ``t``, run by ``handler``, no retry) ends in stored
    state ``state`` (b"c" completed, b"x" archived); its notify task held until then, and with
    ``alter`` = (old, new) the task's stored message altered in Redis first. What the run
    returned (the result, or {"failed": StepFailedError's error}), and the task's id."""
    async def main() -> tuple[Any, str]:
        ac = AsyncClient(backend.new_async(), signing_key=KEY)
        mux = ServeMux()
        mux.handle("t")(handler)

        @mux.durable(name="one_task", queue=Q, client=ac)
        async def one_task(ctx: Durable, order: str) -> Any:
            try:
                return await ctx.task("t", order, queue=Q, max_retry=0)
            except StepFailedError as exc:
                return {"failed": exc.error}

        with Inspector(backend.sync) as insp:
            insp.block_type(Q, NOTIFY)  # the notify task waits until the message is (or is not) altered
            async with serving(backend.new_async(), mux, queues=[Q], signing_key=KEY):
                run = await ac.start("one_task", "o3", id="one:o3", queue=Q)
                tid = f"{run.id}:1:task"
                await until(lambda: (backend.sync.hget(K.tasks, tid) or b"")[:1] == state)
                if alter:
                    stored = backend.sync.hget(K.tasks, tid)
                    assert stored.count(alter[0]) >= 1
                    backend.sync.hset(K.tasks, tid, stored.replace(*alter))
                insp.unblock_type(Q, NOTIFY)
                got = await ac.result(run, timeout=20)
        await ac.close()
        return got, tid

    return asyncio.run(main())


@pytest.mark.parametrize("tamper", [False, True])
def test_a_signed_run_takes_a_task_result_only_from_its_verified_message(backend: Any, tamper: bool) -> None:
    """ctx.task's result reaches the run from the task's own signed message, verified by the
    notify task (the workflow record's copy is not signed): altered in Redis, the run gets the
    task's failure (``refused``, StepFailedError in the function), not the altered result."""
    async def price(task: Any) -> dict[str, int]:
        return {"amount": 10}

    alter = (b"\xa6amount\x0a", b"\xa6amount\x63") if tamper else None
    got, _ = _signed_task_run(backend, price, b"c", alter)
    if tamper:
        assert "ended refused: bad signature" in got["failed"], got
    else:
        assert got == {"amount": 10}


@pytest.mark.parametrize("tamper", [False, True])
def test_a_signed_run_names_a_failed_tasks_error_only_from_its_verified_message(backend: Any, tamper: bool) -> None:
    """A ctx.task that did not complete: the run's StepFailedError names its last error, read from
    the task's archived message and verified as a result is; a message altered in Redis shows no
    error text (it says it is not shown), and the run goes on as it would."""
    async def charge(task: Any) -> None:
        raise ValueError("card declined")

    alter = (b"card declined", b"card accepted") if tamper else None  # (its last error, and its traceback)
    got, tid = _signed_task_run(backend, charge, b"x", alter)
    if tamper:
        assert "ended archived: its error is not shown: bad signature" in got["failed"], got
        assert "card" not in got["failed"]
    else:
        assert got["failed"] == f"task {tid} ended archived: ValueError: card declined"


def test_a_signed_parent_takes_its_child_runs_end_only_from_a_signed_message(backend: Any) -> None:
    """Child runs under signing: the child's start and its end (the internal signal the child's
    last input sends its parent) are messages signed with the worker's client; an end sent for the
    child without the key is archived unrun and the parent waits on; the child's real end reaches
    it, and both runs' every event is tagged."""
    from asynqpy.core.durable.tasks import signal_name

    async def main() -> None:
        ac = AsyncClient(backend.new_async(), signing_key=KEY)
        keyless = AsyncClient(backend.new_async())
        mux = ServeMux()

        @mux.durable(name="kid", queue=Q, client=ac)
        async def kid(ctx: Durable, order: str) -> Any:
            return {"order": order, "go": await ctx.wait_for("go")}

        @mux.durable(name="parent", queue=Q, client=ac)
        async def parent(ctx: Durable, order: str) -> Any:
            return await ctx.child(kid, order)

        with Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), mux, queues=[Q], signing_key=KEY):
                run = await ac.start(parent, "o5", id="parent:o5", queue=Q)
                child = f"{run.id}:1:child"
                await until(lambda: backend.sync.hexists(K.proc, child))  # (started by the parent's step)
                await waiting(insp, child)
                with pytest.raises(TaskFailedError, match="bad signature"):  # a forged end: archived unrun
                    await keyless.signal(run, signal_name(1), {"s": "completed", "v": "forged", "e": ""}, timeout=20)
                assert (insp.process(Q, run.id).state or {}).get("status") == "waiting"
                assert await ac.signal(child, "go", "yes", queue=Q, timeout=20) is True
                assert await ac.result(run, timeout=20) == {"order": "o5", "go": "yes"}
            for rid in (run.id, child):
                history = insp.process(Q, rid, first=1, count=100).history
                assert history and all(isinstance(e.data.get("sig"), bytes) for e in history), rid
        await ac.close()
        await keyless.close()

    asyncio.run(main())


def test_a_signed_and_encrypted_run_completes_and_still_refuses_a_forged_event(backend: Any) -> None:
    """Signing and encryption together: the tag covers the event in clear, inside its envelope (the
    worker tags, then seals; it opens, then verifies); a forged clear event still stops the run."""
    from asynqpy import KeyRing

    ring = KeyRing({"k1": b"1" * 32})
    charged: list[int] = []
    mux = charge_mux(charged)

    async def main() -> None:
        ac = AsyncClient(backend.new_async(), signing_key=KEY, encryption=ring)
        with Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), mux, queues=[Q], signing_key=KEY, encryption=ring):
                run = await ac.start("charge", "o4", id="charge:o4", queue=Q)
                await until(lambda: record(backend, run.id).count >= 3)  # start, quote, wait
                assert await ac.signal(run, "approved", "alice", timeout=20) is True
                assert await ac.result(run, timeout=20) == {"paid": 10, "by": "alice"}
                other = await ac.start("charge", "o5", id="charge:o5", queue=Q)
                await until(lambda: record(backend, other.id).count >= 3)
                forge_signal(backend, other.id)
                with pytest.raises(TaskFailedError, match="bad signature"):
                    await ac.signal(other, "approved", "alice", timeout=20)
            assert insp.process(Q, other.id).status == proc.ERROR
        assert charged == [10]
        await ac.close()

    asyncio.run(main())
