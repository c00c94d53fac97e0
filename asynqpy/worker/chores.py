"""One pass of a per-queue chore (forwarding, recovering expired leases, expiring completed tasks
and trimming the archive) over the queues its :class:`~asynqpy.worker.queues.Cadence` says are
due: the one place that decides which of them the chore's scripts run for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..core.spine.broker import Call
from .queues import Cadence, ServedQueues

RETRY_AFTER = 1.0
"""Seconds after a failed pass (Redis unreachable) its queues are looked at again."""


async def chore_pass(cadence: Cadence, run_many: Callable[[Sequence[Call[Any]]], Awaitable[list[Any]]],
                     cold_keys: Callable[[str], tuple[str, ...]],
                     body: Callable[[list[str], float], Awaitable[float]], served: ServedQueues | None) -> float:
    """Run ``body(queues, now)`` over the due queues and return what it returns (seconds until
    the chore is next due). First, if the server's queues changed (``served``: queues found by a
    pattern, :class:`~asynqpy.worker.queues.ServedQueues`), the cadence follows: a new queue is
    due at once. A due queue whose last look found nothing (a cold one) gets one ``EXISTS`` of
    ``cold_keys(queue)`` (all of them in one batch): one with none of those keys goes back to its
    cold schedule without a script. If the pass raises, its queues are due again in
    :data:`RETRY_AFTER` s, not forgotten."""
    now = asyncio.get_running_loop().time()
    if served is not None and served.version != cadence.version:
        cadence.resize(served.current, now)
        cadence.version = served.version
    queues = cadence.due(now)
    try:
        cold = [q for q in queues if q in cadence.cold]
        if cold:
            found = await run_many([Call(int, command=("EXISTS", *cold_keys(q))) for q in cold])
            empty = {q for q, n in zip(cold, found) if n == 0}
            for q in empty:
                cadence.idle(q, now)
            queues = [q for q in queues if q not in empty]
        return await body(queues, now)
    except BaseException:
        cadence.again(queues, now + RETRY_AFTER)
        raise
