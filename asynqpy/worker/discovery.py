"""Discovery: a server given queue patterns (``queues={"critical": 5, "tenant-*": 1}``) serves
every known queue that matches, present and future, without a restart.

The known queues are the set ``asynqpy:queues``, to which a producer adds a queue with each
enqueue there (so a queue removed and used again is known again). A discovering server reads
its size (``SCARD``, O(1)) every
:data:`DISCOVERY_POLL` s and the whole set only when the size changed, and at least every
:data:`RESCAN_EVERY` s (an add and a drop between two looks leave the size as it was). When the
matches change (:class:`~asynqpy.worker.queues.ServedQueues`), the processor fetches over the new
set at once (:meth:`~asynqpy.worker.processor.Processor.serve`): the wake token a new queue's first
enqueue left is taken by its next wait, so the queue's first task starts within about
DISCOVERY_POLL of its enqueue; the per-queue chores (forwarding, recovery, expiry, the sweep)
follow at their next pass. A server without patterns runs none of this."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

from ..core.spine.broker import Call
from ..core.spine.keys import ALL_QUEUES, known_queues
from ..redisio.connection import REDIS_ERRORS
from .context import Context
from .queues import ServedQueues

log = logging.getLogger("asynqpy.discovery")

DISCOVERY_POLL = 0.3
"""Seconds between two looks at the number of known queues (one SCARD)."""

RESCAN_EVERY = 30.0
"""Seconds between two full reads of the known queues, whatever their number."""


class Discovery:
    """The loop that keeps a server's :class:`ServedQueues` up to date (patterns only)."""

    def __init__(self, ctx: Context, served: ServedQueues, serve: Callable[[Mapping[str, int]], Awaitable[None]],
                 wake: Sequence[Callable[[], None]] = ()) -> None:
        """``serve``: the processor's, told the new queues; ``wake``: the chores to wake at once
        (the forwarder: a new queue's scheduled tasks); the others follow at their next pass."""
        self.ctx = ctx
        self.served = served
        self.serve = serve
        self.wake = wake
        self._size: int | None = None
        self._scanned = float("-inf")
        self.error: str | None = None
        """Why the last look failed (None: it succeeded). Until a look succeeds the server may
        serve none of its queues (an ACL without SCARD or SMEMBERS: issue 42): its /readyz says
        not ready while this is set (server.py, status "discovering")."""

    async def scan(self) -> None:
        """Read every known queue; serve the matches (the processor is told if they changed)."""
        ctx = self.ctx
        self._scanned = asyncio.get_running_loop().time()
        # the size the next looks compare with is this read's own (not the SCARD that asked for
        # it: a queue removed in between, then used again, would leave the set that size and
        # keep this server from serving it until the next rescan)
        self._size, known = await ctx.exec.run(Call(_sized, command=("SMEMBERS", ALL_QUEUES)))
        added, dropped = self.served.replace(known)
        if added or dropped:
            log.info("queues matching %s:%s%s", ", ".join(p for p, _ in self.served.patterns),
                     _listed("serving", added), _listed("no longer serving", dropped))
            await self.serve(dict(self.served.current))
            for wake in self.wake:
                wake()

    async def look(self) -> None:
        """One look: the whole set if its size changed or a rescan is due."""
        size = await self.ctx.exec.run(Call(int, command=("SCARD", ALL_QUEUES)))
        if size != self._size or asyncio.get_running_loop().time() - self._scanned >= RESCAN_EVERY:
            await self.scan()

    async def run(self) -> None:
        while not self.ctx.stopping.is_set():
            try:
                await self.look()
                self.error = None
            except REDIS_ERRORS as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                self.ctx.health.failed("looking for queues matching the server's patterns", exc)
            if await self.ctx.sleep(DISCOVERY_POLL):
                break


def _sized(members: Collection[bytes | str]) -> tuple[int, list[str]]:
    """The set's size and its valid queue names (:meth:`Broker.queues`), from one SMEMBERS."""
    return len(members), known_queues(members)


def _listed(what: str, queues: list[str]) -> str:
    if not queues:
        return ""
    shown = ", ".join(queues[:10]) + (f" and {len(queues) - 10} more" if len(queues) > 10 else "")
    return f" {what} {shown};"
