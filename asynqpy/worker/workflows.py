"""Propagator: delivers parents' ends to the tasks waiting on them (workflows, ``after=``).

A parent's finishing script writes its end to its queue's outbox stream (when children wait on
it) and says so in its reply; the worker that wrote it kicks this loop at once. The recoverer
kicks it too whenever it finds an outbox non-empty (an entry left by a propagator that died, or
written by an operator's archive or delete), so nothing waits longer than a recoverer pass. A pass
runs :func:`asynqpy.core.workflows.plans.propagate` until the outbox is empty: every step is idempotent,
so several propagators (one per server) may deliver the same entry; the second changes nothing."""

from __future__ import annotations

import asyncio
import logging

from ..core.workflows import plans as flows
from ..redisio.executor import arun_plan
from .context import Context

log = logging.getLogger("asynqpy.propagator")

BATCH = 100
"""Outbox entries read per round trip."""


class Propagator:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def propagate_once(self) -> float:
        """Drain the outboxes of the queues kicked so far; returns how long to wait (until kicked)."""
        ctx = self.ctx
        ctx.outbox_ready.clear()
        queues, ctx.outboxes = ctx.outboxes, set()
        failed: set[str] = set()
        for q in sorted(queues):
            try:
                while True:
                    n, woke = await arun_plan(ctx.exec, flows.propagate(ctx.broker, q, BATCH))
                    for other in woke:
                        queues.add(other) if other == q else ctx.kick_outbox(other)
                    if n < BATCH:
                        break
            except Exception as exc:  # noqa: BLE001 - kept for the next pass; the other queues go on
                log.warning("delivering the ends of parents in queue %s failed (retried): %r", q, exc)
                failed.add(q)
        if failed:
            ctx.outboxes |= failed
            return 1.0
        return 3600.0

    async def _pause(self, wait: float) -> bool:
        """Sleep until kicked, ``wait`` seconds pass or the server stops; True if stopping."""
        ctx = self.ctx
        if not ctx.outbox_ready.is_set() and not ctx.stopping.is_set():
            kicked = asyncio.ensure_future(ctx.outbox_ready.wait())
            stopping = asyncio.ensure_future(ctx.stopping.wait())
            try:
                await asyncio.wait([kicked, stopping], timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                kicked.cancel()
                stopping.cancel()
        return ctx.stopping.is_set()

    async def run(self) -> None:
        await self.ctx.repeat("delivering parents' ends", self.propagate_once, error_wait=1.0, pause=self._pause,
                              loop="propagator")
