"""Janitor: deletes completed tasks whose retention is over and trims the archive to its limits,
in bounded batches, sleeping until the next retention expiry (at most ``janitor_interval``).

Every ``reconcile_interval`` it also sweeps each queue's tasks (``reconcile`` script, one HSCAN
step of 200 tasks per call, 10 ms apart) and puts a task whose state and container disagree
(keys removed or corrupted by hand) back where its state says, so nothing stays stuck."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..core.broker import Call
from .context import Context

log = logging.getLogger("asynqpy.janitor")


class Janitor:
    def __init__(self, ctx: Context, batch: int = 100, sweep_step: int = 200) -> None:
        self.ctx = ctx
        self.batch = batch
        self.sweep_step = sweep_step
        self._cursors: dict[str, str] = {}  # queues being swept -> HSCAN cursor
        self._next_sweep = 0.0  # loop time the next sweep starts

    async def sweep_once(self) -> float:
        """One reconcile step for every queue being swept; returns seconds until the next step."""
        ctx = self.ctx
        interval = ctx.options.reconcile_interval
        if not interval:
            return float("inf")
        now = asyncio.get_running_loop().time()
        if not self._cursors:
            if now < self._next_sweep:
                return self._next_sweep - now
            self._cursors = {q: "0" for q in ctx.queues}
            self._next_sweep = now + interval
        queues = list(self._cursors)
        results = await ctx.exec.run_many([ctx.broker.reconcile(q, self._cursors[q], self.sweep_step) for q in queues])
        for q, res in zip(queues, results):
            if isinstance(res, Exception):
                ctx.health.failed(f"consistency sweep of queue {q}", res)
                del self._cursors[q]
                continue
            cursor, repaired = res
            for id, what in repaired:
                log.warning("repaired task %s (queue %s): %s", id, q, what)
            if cursor == "0":
                del self._cursors[q]
            else:
                self._cursors[q] = cursor
        return 0.01 if self._cursors else max(0.0, self._next_sweep - asyncio.get_running_loop().time())

    async def clean_once(self) -> float:
        ctx = self.ctx
        o = ctx.options
        wait = o.janitor_interval
        calls: list[Call[Any]] = [ctx.broker.expire(q, self.batch) for q in ctx.queues]
        calls += [ctx.broker.trim(q, o.archive_max_size, int(o.archive_max_age * 1000)) for q in ctx.queues]
        results = await ctx.exec.run_many(calls)
        n = len(ctx.queues)
        for res in results[:n]:
            if isinstance(res, Exception):
                ctx.health.failed("expiring completed tasks", res)
                continue
            deleted, next_ms = res
            if deleted >= self.batch:
                wait = 0.0
            elif next_ms >= 0:
                wait = min(wait, next_ms / 1000 + 0.01)
        for res in results[n:]:
            if isinstance(res, int) and res >= 100:
                wait = 0.0
        return min(wait, await self.sweep_once())

    async def run(self) -> None:
        await self.ctx.repeat("janitor pass", self.clean_once, error_wait=5.0)
