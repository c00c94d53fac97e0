"""The blob janitor of offloaded payloads (docs/offload.md), one loop per server with a blob store.

**Drain**: a task that leaves for good records its blob's name in its queue's ``blobs`` SET (the
exit duty, lua/includes/offload.lua): the loop takes a batch of names, deletes each blob, then the
names. Idempotent: a worker killed between the two deletes the blob again next time (a blob that
is gone is nothing to delete), and several workers may drain one queue at once.

**Sweep** (every ``sweep_interval``): the blobs of each queue whose task is gone, or no longer
refers to them, and older than ``grace`` (a producer stores its blob before the task: a younger
blob's task may be on its way) are deleted: what a crash left (a producer killed between the
blob and the enqueue, a worker between a task's end and the drain), and the blobs of tasks that
left Redis by a way that records nothing (retention expiry, the archive's trim, a queue removed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from ..core.model import codec
from ..core.model.errors import AsynqpyError
from ..core.offload import refs
from ..core.spine import stored
from ..core.spine.keys import queue_keys
from ..redisio.connection import REDIS_ERRORS
from .blobs import check_store as check_store
from .context import Context

log = logging.getLogger("asynqpy.offload")

_FAILURES: tuple[type[Exception], ...] = (*REDIS_ERRORS, AsynqpyError)
DRAIN_BATCH = 100
DRAIN_INTERVAL = 1.0
SWEEP_INTERVAL = 600.0


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def drain(redis: Any, store: Any, queue: str, batch: int = DRAIN_BATCH) -> int:
    """Delete the blobs queue ``queue``'s ended tasks recorded, a batch of names; how many."""
    key = queue_keys(queue).blobs
    names = [_text(n) for n in await redis.srandmember(key, batch) or ()]
    if not names:
        return 0
    loop = asyncio.get_running_loop()
    for name in names:
        await loop.run_in_executor(None, store.delete, name)
    await redis.srem(key, *names)
    return len(names)


def _listing(store: Any, prefix: str) -> list[tuple[str, float]]:
    return list(store.list(prefix))


async def sweep(redis: Any, store: Any, queues: Iterable[str], grace: float = refs.DEFAULT_GRACE,
                now: float | None = None) -> list[str]:
    """Delete the orphan blobs of ``queues`` (no task refers to them, older than ``grace``
    seconds); the names deleted."""
    loop = asyncio.get_running_loop()
    now = time.time() if now is None else now
    gone: list[str] = []
    for queue in queues:
        listed: list[tuple[str, float]] = await loop.run_in_executor(None, _listing, store, queue + "/")
        tasks = queue_keys(queue).tasks
        for name, written in listed:
            parsed = refs.parse_name(name)
            if parsed is None or parsed.queue != queue or now - written < grace:
                continue
            value = await redis.hget(tasks, parsed.task_id)
            msg = None
            if value is not None:
                try:
                    msg = codec.decode(stored.message_of(value))
                except AsynqpyError:  # an undecodable task: its blob is kept (the janitor archives it)
                    continue
            if refs.is_orphan(name, now - written, grace, msg):
                await loop.run_in_executor(None, store.delete, name)
                gone.append(name)
    if gone:
        log.info("deleted %d orphan blob(s) of offloaded payloads", len(gone))
    return gone


class BlobJanitor:
    """The server's loop: drains its queues' ``blobs`` sets every second and sweeps orphans every
    ``sweep_interval`` (nothing when the server has no blob store)."""

    def __init__(self, ctx: Context, queues: list[str], *, grace: float = refs.DEFAULT_GRACE,
                 sweep_interval: float = SWEEP_INTERVAL) -> None:
        self.ctx = ctx
        self.queues = queues
        self.grace = grace
        self.sweep_interval = sweep_interval

    def _queues(self) -> list[str]:
        served = self.ctx.served
        return list(served.current) if served is not None else self.queues

    async def run(self) -> None:
        store = self.ctx.offload
        if store is None:
            return
        next_sweep = time.monotonic()
        while not self.ctx.stopping.is_set():
            try:
                for q in self._queues():
                    while await drain(self.ctx.redis, store, q) == DRAIN_BATCH:
                        pass
                if time.monotonic() >= next_sweep:
                    await sweep(self.ctx.redis, store, self._queues(), self.grace)
                    next_sweep = time.monotonic() + self.sweep_interval
            except _FAILURES as exc:
                log.warning("offloaded payloads: could not delete blobs (will retry): %s", exc)
            try:
                await asyncio.wait_for(self.ctx.stopping.wait(), DRAIN_INTERVAL)
            except asyncio.TimeoutError:
                pass
