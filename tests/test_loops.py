"""One pass of each background loop of a server, driven directly (they were only covered end to
end): the forwarder, the janitor (expiry, archive limits, the consistency sweep), the heartbeat
(lease renewal, lost leases, the server record) and the recoverer. On fakeredis, the real
redis-server and the cluster, with a FakeClock so every time decision is exact."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import msgpack

from asynqpy import FakeClock
from asynqpy.core.model.codec import Message, decode
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import SERVERS, queue_keys, server_info
from asynqpy.redisio.executor import SyncExecutor
from asynqpy.worker.context import Context
from asynqpy.worker.forwarder import Forwarder, ForwarderParams
from asynqpy.worker.heartbeat import INFO_EVERY, Heartbeat, HeartbeatParams, info_ttl_ms
from asynqpy.worker.janitor import Janitor, JanitorParams
from asynqpy.worker.recoverer import LEASE_EXPIRED, Recoverer, RecovererParams
from asynqpy.worker.settings import ServerOptions

T = TypeVar("T")
T0 = 1_700_000_000_000
Q = "loops"
K = queue_keys(Q)


class H:
    def __init__(self, backend: Any, **options: Any) -> None:
        self.backend = backend
        self.r = backend.sync
        self.clock = FakeClock(T0)
        self.b = Broker(self.clock)
        self.x = SyncExecutor(self.r)
        self.options = ServerOptions(queues={Q: 1}, **options).validate()

    def run(self, make: Callable[[Context], Awaitable[T]]) -> T:
        """Run one pass, made from a fresh Context, in its own event loop."""

        async def main() -> T:
            ar = self.backend.new_async()
            try:
                return await make(Context(ar, self.clock))
            finally:
                await ar.aclose()

        return asyncio.run(main())

    def stored(self, id: str) -> bytes | None:
        v: bytes | None = self.r.hget(K.tasks, id)
        return v


def test_forwarder_moves_due_tasks_and_sleeps_until_the_next(backend: Any) -> None:
    h = H(backend, idle_timeout=10)
    h.x.run(h.b.schedule(Q, "soon", Message("t"), 1_000))
    h.x.run(h.b.schedule(Q, "later", Message("t"), 5_000))
    assert h.run(lambda ctx: Forwarder(ctx, ForwarderParams.of(h.options)).forward_once()) == 1.0002  # nothing due: wakes at "soon"
    h.clock.advance(1)
    wait = h.run(lambda ctx: Forwarder(ctx, ForwarderParams.of(h.options)).forward_once())
    assert h.r.lrange(K.pending, 0, -1) == [b"soon"] and h.stored("soon")[:1] == b"p"  # type: ignore[index]
    assert abs(wait - 4.0002) < 1e-9 and h.r.llen(K.wake) == 1  # the next is "later"; a worker is woken
    h.clock.advance(10)
    assert h.run(lambda ctx: Forwarder(ctx, ForwarderParams.of(h.options)).forward_once()) == 10  # "later" moved, nothing left: idle_timeout


def test_forwarder_batch_full_means_go_again_at_once(backend: Any) -> None:
    h = H(backend)
    for i in range(3):
        h.x.run(h.b.schedule(Q, f"s{i}", Message("t"), 1))
    h.clock.advance(1)
    assert h.run(lambda ctx: Forwarder(ctx, replace(ForwarderParams.of(h.options), batch=2)).forward_once()) == 0.0
    assert h.r.llen(K.pending) == 2


def test_janitor_expires_completed_trims_the_archive_and_repairs(backend: Any) -> None:
    h = H(backend, janitor_interval=30, archive_max_size=1, reconcile_interval=300)
    for id in ("kept", "gone", "x1", "x2", "lost"):
        h.x.run(h.b.enqueue(Q, id, Message("t")))
    h.x.run(h.b.dequeue(Q, 5, 30_000, "tok00001"))
    m = Message("t")
    h.x.run(h.b.complete(Q, "kept", "tok00001", m.with_(retention_ms=60_000)))
    h.x.run(h.b.complete(Q, "gone", "tok00001", m.with_(retention_ms=1_000)))
    for id in ("x1", "x2"):
        h.x.run(h.b.archive(Q, id, "tok00001", m, 100, 10**12))
        h.clock.advance(0.001)
    h.r.zrem(K.lease, "lost")  # an active task whose lease entry was removed by hand
    h.r.hset(K.sweep, "last", T0 - 300_000)  # the last sweep (recorded in Redis) ended 300 s ago: one is due
    h.clock.advance(2)
    wait = h.run(lambda ctx: Janitor(ctx, JanitorParams.of(h.options)).clean_once())
    assert h.stored("gone") is None and h.stored("kept") is not None  # retention over / not over
    assert h.r.zrange(K.archived, 0, -1) == [b"x2"] and h.stored("x1") is None  # archive_max_size=1
    assert h.r.get(K.trimmed) == b"1"
    assert h.r.zscore(K.lease, "lost") is not None  # the sweep put the active task's lease back
    assert wait == 30  # the sweep took one step and ended; next: janitor_interval (the sweep's: 300 s)


def test_heartbeat_renews_leases_and_gives_up_lost_ones(backend: Any) -> None:
    h = H(backend, lease=30, heartbeat_interval=5)
    for id in ("mine", "stolen"):
        h.x.run(h.b.enqueue(Q, id, Message("t")))
    h.x.run(h.b.dequeue(Q, 2, 10_000, "tok00001"))
    h.r.hset(K.tasks, "stolen", b"a" + b"tok99999" + h.stored("stolen")[9:])  # type: ignore[index]

    class Run:
        def __init__(self, id: str) -> None:
            self.queue, self.id, self.token, self.lease_until = Q, id, "tok00001", 0.0
            self.msg, self.started_ms, self.deadline_ms = Message("t"), T0, 0
            self.run_of = ""  # not a run of a targeted task

    class Processor:
        def __init__(self) -> None:
            self.held = {(Q, id): Run(id) for id in ("mine", "stolen")}
            self.lost: list[str] = []

        def lose(self, r: Run, why: str) -> None:
            self.lost.append(r.id)
            del self.held[(r.queue, r.id)]

    p = Processor()
    h.clock.advance(5)

    async def beat(ctx: Context) -> None:
        await Heartbeat(ctx, p, HeartbeatParams.of(h.options, "srv-1", 0.0)).beat()  # type: ignore[arg-type]

    h.run(beat)
    assert h.r.zscore(K.lease, "mine") == T0 + 5_000 + 30_000  # renewed from now for a whole lease
    assert p.lost == ["stolen"]  # another worker holds it now: cancelled, nothing written
    assert h.r.zscore(SERVERS, "srv-1") is not None
    info = msgpack.unpackb(h.r.get(server_info("srv-1")))
    assert info["id"] == "srv-1" and [a[0] for a in info["active"]] == ["mine", "stolen"]


def test_the_description_outlives_the_beats_until_its_next_rewrite(backend: Any) -> None:
    """An idle server rewrites its description every INFO_EVERY beats: its TTL covers them and a
    margin of three beats, also for a beat under a second (its TTL was in whole seconds, rounded
    down: 1 s for a 0.2 s beat, rewritten every 1.2 s; the server was listed without a description,
    so ``server ls`` and the console said no live server, a fifth of the time)."""
    for interval in (0.2, 0.3, 1.0):
        h = H(backend, heartbeat_interval=interval, lease=5)

        class Idle:
            held: dict[Any, Any] = {}

        async def beat(ctx: Context) -> None:
            await Heartbeat(ctx, Idle(), HeartbeatParams.of(h.options, "srv-1", 0.0)).beat()  # type: ignore[arg-type]

        h.run(beat)
        rewrite_ms = INFO_EVERY * interval * 1000
        assert info_ttl_ms(interval) == round(rewrite_ms + 3 * interval * 1000)
        ttl = h.r.pttl(server_info("srv-1"))  # (counts down in real time from the SET)
        assert rewrite_ms < ttl <= info_ttl_ms(interval), (interval, ttl)


def test_recoverer_retries_or_archives_expired_leases(backend: Any) -> None:
    h = H(backend, lease=30)
    h.x.run(h.b.enqueue(Q, "again", Message("t", max_retry=3)))
    h.x.run(h.b.enqueue(Q, "done-for", Message("t", max_retry=0)))
    h.x.run(h.b.enqueue(Q, "alive", Message("t")))
    h.x.run(h.b.dequeue(Q, 2, 1_000, "tok00001"))
    h.x.run(h.b.dequeue(Q, 1, 60_000, "tok00002"))
    h.clock.advance(2)
    wait = h.run(lambda ctx: Recoverer(ctx, RecovererParams.of(h.options)).recover_once())
    again, done_for = h.stored("again"), h.stored("done-for")
    assert again is not None and again[:1] == b"r" and decode(again[1:]).retried == 1
    assert decode(again[1:]).last_error == LEASE_EXPIRED
    assert done_for is not None and done_for[:1] == b"x"
    assert h.stored("alive")[:1] == b"a"  # type: ignore[index]
    assert abs(wait - min(10.0, 30 / 3)) < 1e-9  # next look: at most lease/3 away ("alive" expires later)


def test_janitor_forgets_the_waiters_of_deleted_tasks(backend: Any) -> None:
    h = H(backend)
    for id in ("kept", "deleted"):
        h.x.run(h.b.enqueue(Q, id, Message("t")))
        h.x.run(h.b.watch(Q, id, "inbox1"))
    h.r.hdel(K.tasks, "deleted")  # as an operator's delete leaves it: the task gone, its waiter registered
    h.run(lambda ctx: Janitor(ctx, JanitorParams.of(h.options)).sweep_once())  # first sight: recorded
    assert len(h.r.hkeys(K.watch)) == 2  # no sweep at a worker's start
    h.clock.advance(h.options.reconcile_interval)
    h.run(lambda ctx: Janitor(ctx, JanitorParams.of(h.options)).sweep_once())
    assert h.r.hkeys(K.watch) == [b"kept"]


def test_a_cancel_during_a_redis_call_is_not_lost() -> None:
    """Python < 3.12's asyncio.wait_for, which redis-py's send_packed_command uses when the client
    has a socket_timeout (fakeredis's: 5 s), returns the result instead of raising CancelledError
    when the cancel arrives in the turn of the loop where the send completed: the heartbeat of a
    stopping server once went on beating, and asyncio.run waited for it forever. The async
    executor raises the lost cancellation; here the cancel arrives at each step of a call."""
    import fakeredis

    from asynqpy.core.spine.broker import Call
    from asynqpy.redisio.executor import AsyncExecutor

    async def main() -> None:
        x = AsyncExecutor(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
        call: Call[Any] = Call(lambda r: r, command=("SET", "k", "v"))
        await x.run_many([call])  # connected
        ops: list[Callable[[], Awaitable[Any]]] = [lambda: x.run_many([call]), lambda: x.run(call),
                                                  lambda: x.run_many_replicated([call], 0, 0)]
        cancelled = 0
        for op in ops:
            for steps in range(8):
                task = asyncio.ensure_future(op())
                for _ in range(steps):
                    await asyncio.sleep(0)
                if task.done():  # finished before the cancel: nothing to lose
                    continue
                task.cancel()
                await asyncio.wait([task])
                assert task.cancelled(), f"a cancel after {steps} steps was lost: {task.result()!r}"
                cancelled += 1
        assert cancelled >= 6

    asyncio.run(main())


def test_a_stopped_heartbeat_ends_even_if_its_cancellation_is_lost() -> None:
    """Should a client library still lose a cancellation, the heartbeat's loop ends at its next
    turn once the server stopped it: a stopped server leaves no task running (asyncio.run waits,
    before it returns, for every task left)."""
    from types import SimpleNamespace

    async def main() -> None:
        hb = Heartbeat(None, SimpleNamespace(held={}),  # type: ignore[arg-type]
                       HeartbeatParams("srv-1", 0.0, 0.001, 1.0, {Q: 1}, 1, False))
        beating = asyncio.Event()
        lost: list[bool] = []

        async def beat() -> None:  # a call that loses the first cancellation
            beating.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost.append(True)

        hb.beat = beat  # type: ignore[method-assign]
        task = asyncio.create_task(hb.run())
        await beating.wait()
        hb.stop()
        task.cancel()
        await asyncio.wait([task], timeout=2)  # (bounds a hang; ends at once)
        assert lost and task.done()

    asyncio.run(main())


def test_forwarder_takes_a_larger_batch_after_full_passes_and_gates_keyed_tasks_with_the_next_forward(
        backend: Any) -> None:
    """A full pass makes the queue's next batch 4x larger (a burst of due timers drains in few
    passes), a pass taking a quarter or less makes it smaller again; a due keyed task whose key is
    held is named by one pass and queued behind its holder in the next pass's pipeline, before that
    pass's forward."""
    h = H(backend)
    params = replace(ForwarderParams.of(h.options), batch=2, most=8)
    for i in range(11):
        h.x.run(h.b.schedule(Q, f"s{i:02}", Message("t"), 1))
    h.x.run(h.b.schedule(Q, "k1", Message("t", key="acct"), 1))
    h.x.run(h.b.schedule(Q, "k2", Message("t", key="acct"), 1))
    h.clock.advance(1)
    h.x.run(h.b.key_gate(Q, []))  # (its script loaded: a first call that is not runs after the pipeline's forward)

    async def passes(ctx: Context) -> list[tuple[int, int, int]]:
        f = Forwarder(ctx, params)
        seen = []
        for k in range(4):
            if k == 3:  # one more falls due: a pass taking a quarter of its batch or less
                h.x.run(h.b.schedule(Q, "one", Message("t"), 1))
                h.clock.advance(1)
                f._cadence.now(Q, asyncio.get_running_loop().time())  # (as its tick does: worker/forwarder.py)
            await f.forward_once()
            seen.append((f._batch.get(Q, 2), int(h.r.llen(K.pending)), len(f._gates.get(Q, []))))
        return seen

    seen = h.run(passes)
    # the keyed two (their ids sort first): k1 takes the free key and moves, k2 (the key held) is
    # named (full: 8 next); k2 is gated before the next forward (it waits behind k1) and 8 move
    # (full); then the last 3 (not a quarter of 8)
    assert seen[:3] == [(8, 1, 1), (8, 9, 0), (8, 12, 0)], seen
    assert h.stored("k1")[:1] == b"p" and h.stored("k2")[:1] == b"b"  # type: ignore[index]
    assert seen[3] == (2, 13, 0) and h.r.zcard(K.scheduled) == 0, seen  # (1 of 8: back to 2)

