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
task at their next cold check, or when it is due if they saw it before.)

Due keyed tasks (a durable run's timers among them) are named by the forward script with their
keys and gated (``key_gate``) in the same pipeline as the queue's next forward: one round trip a
pass. A queue whose pass was full is forwarded again at once with a batch four times larger (at
most ``most``), and a quarter of it once a pass takes a quarter or less (never under ``batch``): a
burst of due timers drains in few passes, each a turn of a loop the handlers keep busy, while a
quiet queue's script stays short."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from ..core.spine.broker import Call, Forwarded
from ..core.spine.keys import queue_keys
from ..redisio.connection import REDIS_ERRORS
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
    most: int = 1000  # the largest batch, after full passes

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
        self._gates: dict[str, list[tuple[str, str]]] = {}  # due keyed tasks named, gated with the next forward
        self._batch: dict[str, int] = {}  # a queue's batch after full passes (else params.batch)

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
        calls: list[Call[Any]] = []
        gated: set[str] = set()
        # a gate before its queue's forward, in one pipeline: the forward sees what is left (a gate
        # whose script this process had not loaded yet is sent again after the pipeline: the forward
        # names its tasks again and the next gate finds them gated, one pass more, nothing lost)
        for q in queues:
            keyed = self._gates.pop(q, None)
            if keyed:
                calls.append(ctx.broker.key_gate(q, keyed))
                gated.add(q)
            calls.append(ctx.broker.forward(q, self._batch.get(q, p.batch)))
        results = iter(await ctx.exec.run_many(calls))
        done = asyncio.get_running_loop().time()  # (due times count from the replies)
        for q in queues:
            if q in gated:  # the gate's codes came first
                res = next(results)
                if isinstance(res, Exception):  # (its tasks are still due: this forward names them again)
                    ctx.health.failed(f"gating due keyed tasks of queue {q}", res)
            res = next(results)
            if isinstance(res, Exception):
                ctx.health.failed(f"forwarding queue {q}", res)
                here: float | None = 1.0
            else:
                here = self._forwarded(q, res)
            if here is None:  # nothing scheduled: a cold check, or its tick, next
                cadence.idle(q, done)
                continue
            cadence.at(q, done + here)
            wait = min(wait, here)
        return min(wait, others)

    def _forwarded(self, q: str, res: Forwarded) -> float | None:
        """Seconds until ``q`` is due for a look again after its forward (None: nothing left
        scheduled)."""
        p = self.p
        moved, next_ms = int(res[0]), int(res[1])
        batch = self._batch.get(q, p.batch)
        took = moved + len(res.keyed)
        if took >= batch:  # a full pass: more are due now, take more at once
            self._batch[q] = min(p.most, batch * 4)
        elif took * 4 <= batch:  # (not at once: a burst's passes take a varying share of a batch)
            self._batch[q] = max(p.batch, batch // 4)
        if res.keyed:  # due keyed tasks take their key or queue behind it: with the next forward
            self._gates[q] = res.keyed
            return 0.0
        if moved >= batch:
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
