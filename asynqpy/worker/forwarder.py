"""Forwarder: moves scheduled and retry tasks to pending when they are due.

It sleeps exactly until the earliest due time the forward script reports (on the Redis clock, so a
skewed host clock cannot make a task run early), and wakes earlier when a script signals, through
the queue's ``tick`` list, that a task with an earlier due time arrived."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..core.keys import queue_keys
from ..core.serial import gate_due
from ..redisio.connection import REDIS_ERRORS
from ..redisio.executor import arun_plan
from .context import Context
from .settings import ServerOptions

log = logging.getLogger("asynqpy.forwarder")


@dataclass(frozen=True)
class ForwarderParams:
    """What the forwarder reads: the queues, how long it may sleep, how many tasks a call moves."""

    queues: tuple[str, ...]
    idle_timeout: float
    batch: int = 100

    @classmethod
    def of(cls, o: ServerOptions) -> ForwarderParams:
        return cls(tuple(o.queues), o.idle_timeout)


class Forwarder:
    def __init__(self, ctx: Context, params: ForwarderParams) -> None:
        self.ctx = ctx
        self.p = params
        self._tick = asyncio.Event()

    async def _listen(self) -> None:
        keys = [queue_keys(q).tick for q in self.p.queues]
        while True:
            try:
                if await self.ctx.blpop_any(keys, self.p.idle_timeout):
                    self._tick.set()
            except REDIS_ERRORS as exc:
                self.ctx.health.failed("waiting for schedule changes", exc)
                await asyncio.sleep(1.0)

    async def forward_once(self) -> float:
        """Forward due tasks of every queue; returns seconds until the next is due."""
        ctx, p = self.ctx, self.p
        wait = p.idle_timeout
        results = await ctx.exec.run_many([ctx.broker.forward(q, p.batch) for q in p.queues])
        for q, res in zip(p.queues, results):
            if isinstance(res, Exception):
                ctx.health.failed(f"forwarding queue {q}", res)
                wait = min(wait, 1.0)
                continue
            moved, next_ms = res
            keyed = getattr(res, "keyed", [])
            if keyed:  # due keyed tasks take their key or queue behind it (their key's list is named)
                try:
                    await arun_plan(ctx.exec, gate_due(ctx.broker, q, keyed))
                except REDIS_ERRORS as exc:
                    ctx.health.failed(f"gating due keyed tasks of queue {q}", exc)
                    wait = min(wait, 1.0)
                    continue
                wait = 0.0  # forward again: the next due task's time
            if moved >= p.batch:
                wait = 0.0
            elif next_ms >= 0:
                wait = min(wait, next_ms / 1000 + 0.0002)
        return wait

    async def _pass(self) -> float:
        self._tick.clear()  # before the pass: a tick arriving during it is not lost
        return await self.forward_once()

    async def _pause(self, wait: float) -> bool:
        """Sleep ``wait`` seconds or until a tick; True if the server is stopping."""
        if wait > 0:
            try:
                await asyncio.wait_for(self._tick.wait(), wait)
            except asyncio.TimeoutError:
                pass
        return self.ctx.stopping.is_set()

    async def run(self) -> None:
        listener = asyncio.create_task(self._listen(), name="asynqpy-forwarder-listen")
        try:
            await self.ctx.repeat("forwarding", self._pass, error_wait=1.0, pause=self._pause, loop="forwarder")
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
