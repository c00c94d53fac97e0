"""Forwarder: moves scheduled and retry tasks to pending when they are due.

It sleeps exactly until the earliest due time the forward script reports (on the Redis clock, so a
skewed host clock cannot make a task run early), and wakes earlier when a script signals, through
the queue's ``tick`` list, that a task with an earlier due time arrived.

Each queue is looked at on its own schedule (:class:`~asynqpy.worker.queues.Cadence`): when its
next task falls due (at most ``idle_timeout`` on), when its tick fires, and, for a queue that had
nothing scheduled, at a cold check (one ``EXISTS`` of its scheduled and retry sets, then the forward
script only if either exists) spread so that all the queues together cost at most
:data:`~asynqpy.worker.queues.COLD_CHECKS_PER_S` a second: an idle server's commands per second do
not grow with the number of queues it serves. (A tick is taken by one server; the others see the
task at their next cold check, or when it is due if they saw it before.)"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..core.limits.serial import gate_due
from ..core.spine.keys import queue_keys
from ..redisio.connection import REDIS_ERRORS
from ..redisio.executor import arun_plan
from .chores import chore_pass
from .context import Context
from .queues import COLD_CHECKS_PER_S, Cadence
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
        self._cadence = Cadence(params.queues, params.idle_timeout, COLD_CHECKS_PER_S)
        self._ticks = {queue_keys(q).tick: q for q in params.queues}

    def wake(self) -> None:
        """Make a pass now (the served queues changed: a new queue's scheduled tasks are looked at
        at once, and its tick list listened to)."""
        self._tick.set()

    async def _listen(self) -> None:
        keys, version = list(self._ticks), self._cadence.version
        while True:
            try:
                if version != self._cadence.version:  # the served queues changed (worker/chores.py)
                    version = self._cadence.version
                    self._ticks = {queue_keys(q).tick: q for q in self._cadence.queues}
                    keys = list(self._ticks)
                got = await self.ctx.blpop_any(keys, self.p.idle_timeout) if keys else None
                if not keys:  # (no queue yet: a pattern that matches none)
                    await asyncio.sleep(self.p.idle_timeout)
                if got:
                    self._cadence.now(self._ticks[got[0]], asyncio.get_running_loop().time())
                    self._tick.set()
            except REDIS_ERRORS as exc:
                self.ctx.health.failed("waiting for schedule changes", exc)
                await asyncio.sleep(1.0)

    async def forward_once(self) -> float:
        """Forward the due tasks of every queue due for a look; returns seconds until the next."""
        return await chore_pass(self._cadence, self.ctx.exec.run_many,
                                lambda q: (queue_keys(q).scheduled, queue_keys(q).retry), self._forward_once,
                                self.ctx.served)

    async def _forward_once(self, queues: list[str], now: float) -> float:
        ctx, p, cadence = self.ctx, self.p, self._cadence
        others = cadence.next_in(now)  # (before this pass's queues are scheduled again)
        wait = p.idle_timeout
        results = await ctx.exec.run_many([ctx.broker.forward(q, p.batch) for q in queues])
        done = asyncio.get_running_loop().time()  # (due times count from the replies)
        for q, res in zip(queues, results):
            if isinstance(res, Exception):
                ctx.health.failed(f"forwarding queue {q}", res)
                here: float | None = 1.0
            else:
                here = await self._forwarded(q, res)
            if here is None:  # nothing scheduled: a cold check, or its tick, next
                cadence.idle(q, done)
                continue
            cadence.at(q, done + here)
            wait = min(wait, here)
        return min(wait, others)

    async def _forwarded(self, q: str, res: tuple[int, int]) -> float | None:
        """Seconds until ``q`` is due for a look again after its forward (None: nothing left
        scheduled)."""
        ctx, p = self.ctx, self.p
        moved, next_ms = res
        keyed = getattr(res, "keyed", [])
        if keyed:  # due keyed tasks take their key or queue behind it (their key's list is named)
            try:
                await arun_plan(ctx.exec, gate_due(ctx.broker, q, keyed))
            except REDIS_ERRORS as exc:
                ctx.health.failed(f"gating due keyed tasks of queue {q}", exc)
                return 1.0
            return 0.0  # forward again: the next due task's time
        if moved >= p.batch:
            return 0.0
        if next_ms >= 0:
            return min(p.idle_timeout, next_ms / 1000 + 0.0002)
        return None

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
