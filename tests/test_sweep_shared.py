"""The consistency sweep is shared by the workers of a queue (lua/sweep.lua): its lease and
cursors live in the queue's slot, so three janitors on one queue make one sweep per interval, not
three; a sweep whose holder stops is continued by another from its last step once the lease has
expired; no sweep at a worker's start. On fakeredis, the real redis-server and the cluster, with a
FakeClock (every time decision is made at the clock's time by the scripts)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from asynqpy import FakeClock
from asynqpy.core.model.codec import Message, encode
from asynqpy.core.spine.keys import queue_keys
from asynqpy.worker.context import Context
from asynqpy.worker.janitor import Janitor, JanitorParams
from asynqpy.worker.settings import ServerOptions

T0 = 1_700_000_000_000
Q = "shared"
K = queue_keys(Q)
N = 300  # tasks: a hash of this size is scanned in several steps of 50
LOST = ("t7", "t150", "t299")  # scheduled tasks missing from their zset: each sweep finds all three


def _fill(r: Any) -> None:
    stored = b"s" + encode(Message("t", "x" * 80))  # over 64 bytes: a real hash table (HSCAN steps)
    r.hset(K.tasks, mapping={f"t{i}": stored for i in range(N)})
    r.zadd(K.scheduled, {f"t{i}": T0 + 3_600_000 for i in range(N) if f"t{i}" not in LOST})
    r.hset(K.sweep, "last", T0 - 60_000)  # the last sweep ended a minute ago: one is due


def _janitors(backend: Any, clock: FakeClock, n: int, save: float = 0.0,
              saves: list[int] | None = None) -> tuple[list[Janitor], list[int], list[Any]]:
    """``n`` janitors (as many workers), each on its own connection; counts[i]: the reconcile
    steps janitor i called (saves[i]: the stores of its cursors). ``save``: seconds between two
    stores of the cursors (0: at each step)."""
    params = replace(JanitorParams.of(ServerOptions(queues={Q: 1}, reconcile_interval=60).validate()),
                     sweep_step=50, sweep_lease=5.0, sweep_save=save)
    counts = [0] * n
    saves = [0] * n if saves is None else saves
    janitors, conns = [], []
    for i in range(n):
        conn = backend.new_async()
        ctx = Context(conn, clock)
        reconcile, sweep_save = ctx.broker.reconcile, ctx.broker.sweep_save

        def counted(*a: Any, _i: int = i, _f: Any = reconcile, **kw: Any) -> Any:
            counts[_i] += 1
            return _f(*a, **kw)

        def saved(*a: Any, _i: int = i, _f: Any = sweep_save, **kw: Any) -> Any:
            saves[_i] += 1
            return _f(*a, **kw)

        ctx.broker.reconcile = counted  # type: ignore[method-assign]
        ctx.broker.sweep_save = saved  # type: ignore[method-assign]
        janitors.append(Janitor(ctx, params))
        conns.append(conn)
    return janitors, counts, conns


def _sweeping(r: Any) -> bool:
    return any(k.startswith(b"c:") for k in r.hkeys(K.sweep))


def _repaired(r: Any) -> bool:
    return all(r.zscore(K.scheduled, id) is not None for id in LOST)


def test_three_janitors_make_one_sweep_per_interval_not_three(backend: Any) -> None:
    r, clock = backend.sync, FakeClock(T0)
    _fill(r)

    async def main() -> None:
        janitors, counts, conns = _janitors(backend, clock, 3)
        try:
            for _ in range(40):  # every janitor passes in turn, as three workers' loops would
                for j in janitors:
                    await j.sweep_once()
                if not _sweeping(r) and sum(counts):
                    break
            assert _repaired(r) and not _sweeping(r)
            one_sweep = sum(counts)
            assert 4 <= one_sweep and sorted(counts)[:2] == [0, 0]  # one janitor swept, in several steps
            assert int(r.hget(K.sweep, "last")) == T0  # the sweep's end, recorded
            for j in janitors:  # the next sweep is not due for an interval: nobody steps
                await j.sweep_once()
            assert sum(counts) == one_sweep
            clock.advance(60)  # an interval later: again one sweep in all, as many steps
            r.zrem(K.scheduled, *LOST)
            for j in janitors:
                j._due.clear()  # (as if their loops had slept until now: their clocks are not the FakeClock)
            for _ in range(40):
                for j in janitors:
                    await j.sweep_once()
                if not _sweeping(r) and sum(counts) > one_sweep:
                    break
            assert _repaired(r) and sum(counts) == 2 * one_sweep
        finally:
            for c in conns:
                await c.aclose()

    asyncio.run(main())


def test_a_sweep_left_by_its_holder_is_continued_by_another_from_its_last_step(backend: Any) -> None:
    r, clock = backend.sync, FakeClock(T0)
    _fill(r)

    async def main() -> None:
        (a, b, c), counts, conns = _janitors(backend, clock, 3)
        try:
            await a.sweep_once()
            await a.sweep_once()  # two steps, then this worker stops (dies)
            assert counts[0] == 2 and _sweeping(r)
            assert await b.sweep_once() > 4.0 and counts[1] == 0  # the lease is alive: b waits for its end
            clock.advance(5)  # the lease expires
            while _sweeping(r):
                await c.sweep_once()  # another worker goes on from a's last cursor
            assert _repaired(r)
            shared = counts[0] + counts[2]
            await a.sweep_once()  # the first holder comes back: its step is not stored, its lease gone
            assert not _sweeping(r) and not a._held
            clock.advance(60)  # the next sweep, by c alone from the start: as many steps as a and c took
            c._due.clear()
            before = counts[2]
            while await c.sweep_once() < 1:
                pass
            assert counts[2] - before == shared
        finally:
            for conn in conns:
                await conn.aclose()

    asyncio.run(main())


def test_no_sweep_at_start_the_first_is_due_an_interval_after_the_queue_is_first_seen(backend: Any) -> None:
    r, clock = backend.sync, FakeClock(T0)
    _fill(r)
    r.delete(K.sweep)  # a queue never swept

    async def main() -> None:
        saves = [0]
        (a,), counts, conns = _janitors(backend, clock, 1, save=1.0, saves=saves)
        try:
            assert await a.sweep_once() > 59 and counts == [0]  # recorded, not swept
            assert int(r.hget(K.sweep, "last")) == T0 and 0 < r.pttl(K.sweep) <= 3 * 60_000 + 5_000
            clock.advance(60)
            a._due.clear()
            while await a.sweep_once() < 1:
                pass
            assert _repaired(r) and counts[0] >= 4
            assert 1 <= saves[0] < counts[0]  # its cursors stored once a second and at the end, not per step
        finally:
            for conn in conns:
                await conn.aclose()

    asyncio.run(main())
