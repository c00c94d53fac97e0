"""Janitor: deletes completed tasks whose retention is over and trims the archive to its limits,
in bounded batches, sleeping until the next retention expiry (at most ``janitor_interval``).

Every ``reconcile_interval`` it also sweeps each queue's tasks (``reconcile`` script, one HSCAN
step of 200 tasks per call, 10 ms apart) and puts a task whose state and container disagree
(keys removed or corrupted by hand) back where its state says, so nothing stays stuck."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from ..core.broker import TRIM_PER_CALL, Call
from ..core.keys import queue_keys
from ..core.serial import sweep_keys
from ..redisio.connection import REDIS_ERRORS
from ..redisio.executor import arun_plan
from .context import Context
from .queues import COLD_CHECKS_PER_S, Cadence
from .settings import ServerOptions

log = logging.getLogger("asynqpy.janitor")


@dataclass(frozen=True)
class JanitorParams:
    """What the janitor reads: the queues, its longest sleep, the archive's limits, how often the
    consistency sweep runs (0 = never), batch sizes."""

    queues: tuple[str, ...]
    interval: float
    archive_max_size: int
    archive_max_age: float
    reconcile_interval: float
    batch: int = 100
    sweep_step: int = 200

    @classmethod
    def of(cls, o: ServerOptions) -> JanitorParams:
        return cls(tuple(o.queues), o.janitor_interval, o.archive_max_size, o.archive_max_age,
                   o.reconcile_interval)


class Janitor:
    def __init__(self, ctx: Context, params: JanitorParams) -> None:
        self.ctx = ctx
        self.p = params
        self._cursors: dict[tuple[str, str], str] = {}  # (kind, queue) being swept -> HSCAN cursor
        self._next_sweep = 0.0  # loop time the next sweep starts
        self._cadence = Cadence(params.queues, params.interval, COLD_CHECKS_PER_S)  # (clean_once)

    async def sweep_once(self) -> float:
        """One step of the sweep of every queue: its tasks (reconcile), and its watch, children and
        deps hashes (entries of tasks that are gone); returns seconds until the next step."""
        ctx, p = self.ctx, self.p
        interval = p.reconcile_interval
        if not interval:
            return float("inf")
        now = asyncio.get_running_loop().time()
        if not self._cursors:
            if now < self._next_sweep:
                return self._next_sweep - now
            self._cursors = {(kind, q): "0" for q in p.queues for kind in ("tasks", "watch", "children", "deps",
                                                                            "keys")}
            self._next_sweep = now + interval
        for q in [q for kind, q in self._cursors if kind == "keys"]:  # keys held by tasks that ended
            try:
                cursor, freed = await arun_plan(ctx.exec, sweep_keys(ctx.broker, q, self._cursors[("keys", q)],
                                                                     p.sweep_step))
            except REDIS_ERRORS as exc:
                ctx.health.failed(f"consistency sweep of queue {q}", exc)
                del self._cursors[("keys", q)]
                continue
            if freed:
                log.warning("released %d key(s) of queue %s whose task ended without releasing them", freed, q)
            if cursor == "0":
                del self._cursors[("keys", q)]
            else:
                self._cursors[("keys", q)] = cursor
        steps = [s for s in self._cursors if s[0] != "keys"]
        results = await ctx.exec.run_many([
            ctx.broker.reconcile(q, self._cursors[(kind, q)], p.sweep_step) if kind == "tasks"
            else ctx.broker.forget_gone(q, kind, self._cursors[(kind, q)], p.sweep_step) for kind, q in steps])
        for (kind, q), res in zip(steps, results):
            if isinstance(res, Exception):
                ctx.health.failed(f"consistency sweep of queue {q}", res)
                del self._cursors[(kind, q)]
                continue
            if kind == "tasks":
                cursor, repaired = res
                for id, what in repaired:
                    log.warning("repaired task %s (queue %s): %s", id, q, what)
            else:
                cursor, removed = res
                if removed:
                    what = {"watch": "the waiters", "children": "the children", "deps": "the parents"}[kind]
                    log.info("forgot %s of %d task(s) that are gone (queue %s)", what, removed, q)
            if cursor == "0":
                del self._cursors[(kind, q)]
            else:
                self._cursors[(kind, q)] = cursor
        return 0.01 if self._cursors else max(0.0, self._next_sweep - asyncio.get_running_loop().time())

    async def clean_once(self) -> float:
        """Expire completed tasks and trim the archive of the queues due for a look (their own
        schedule, :class:`~asynqpy.worker.queues.Cadence`: a queue with completed tasks when the
        next expires, at most ``janitor_interval`` on; one with neither completed nor archived
        tasks at a cold check, one ``EXISTS``), then a step of the sweep."""
        cadence = self._cadence
        now = asyncio.get_running_loop().time()
        queues = cadence.due(now)
        try:
            return await self._clean_once(queues, now)
        except BaseException:  # (Redis unreachable): these queues are looked at again, not forgotten
            cadence.again(queues, now + 1.0)
            raise

    async def _clean_once(self, queues: list[str], now: float) -> float:
        ctx, p, cadence = self.ctx, self.p, self._cadence
        cold = [q for q in queues if q in cadence.cold]
        if cold:  # one EXISTS each: the scripts only where completed or archived tasks are
            found = await ctx.exec.run_many([Call(int, command=("EXISTS", queue_keys(q).completed,
                                                                queue_keys(q).archived)) for q in cold])
            empty = {q for q, n in zip(cold, found) if n == 0}
            for q in empty:
                cadence.idle(q, now)
            queues = [q for q in queues if q not in empty]
        others = cadence.next_in(now)
        wait = p.interval
        calls: list[Call[Any]] = [ctx.broker.expire(q, p.batch) for q in queues]
        calls += [ctx.broker.trim(q, p.archive_max_size, int(p.archive_max_age * 1000)) for q in queues]
        results = await ctx.exec.run_many(calls)
        done = asyncio.get_running_loop().time()
        n = len(queues)
        for q, res, trimmed in zip(queues, results[:n], results[n:]):
            here: float | None = None
            if isinstance(res, Exception):
                ctx.health.failed("expiring completed tasks", res)
                here = p.interval
            else:
                deleted, next_ms = res
                if deleted >= p.batch:
                    here = 0.0
                elif next_ms >= 0:
                    here = min(p.interval, next_ms / 1000 + 0.01)
            if isinstance(trimmed, int) and trimmed >= TRIM_PER_CALL:  # more may be left: again at once
                here = 0.0
            if here is None:  # nothing left to expire: a cold check next (which sees the archive)
                cadence.idle(q, done)
            else:
                cadence.at(q, done + here)
                wait = min(wait, here)
        return min(wait, others, await self.sweep_once())

    async def run(self) -> None:
        await self.ctx.repeat("janitor pass", self.clean_once, error_wait=5.0, loop="janitor")
