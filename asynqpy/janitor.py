"""Janitor: deletes completed tasks whose retention is over and trims the archive to its limits,
in bounded batches, sleeping until the next retention expiry (at most ``janitor_interval``)."""

from __future__ import annotations

import logging
from typing import Any

from .broker import Call
from .server import Context

log = logging.getLogger("asynqpy.janitor")


class Janitor:
    def __init__(self, ctx: Context, batch: int = 100) -> None:
        self.ctx = ctx
        self.batch = batch

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
                log.warning("expiring completed tasks failed: %s", res)
                continue
            deleted, next_ms = res
            if deleted >= self.batch:
                wait = 0.0
            elif next_ms >= 0:
                wait = min(wait, next_ms / 1000 + 0.01)
        for res in results[n:]:
            if isinstance(res, int) and res >= 100:
                wait = 0.0
        return wait

    async def run(self) -> None:
        await self.ctx.repeat("janitor pass", self.clean_once, error_wait=5.0)
