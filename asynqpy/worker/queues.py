"""Which queue the processor's next dequeue tries, and which it skips for now (no I/O).

:meth:`QueueOrder.order` lists the queues by weight (``strict_priority``) or weighted-random (the
default), a queue whose wake token this server took and has not acted on yet (``owed``) first.
:meth:`QueueOrder.skip` passes over, for a while, a queue found empty (:data:`EMPTY_RECHECK`,
while other queues keep the server busy), one whose limits hold its tasks back (until the dequeue
said), and, on a cluster, one whose master could not be reached (with a backoff of its own).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from ..core.broker import Dequeued

EMPTY_RECHECK = 0.1
"""Seconds a queue found empty is skipped while other queues keep the server busy."""


class QueueOrder:
    """The queue choice of one processor; times are the event loop's (seconds)."""

    def __init__(self, weights: Mapping[str, int], strict: bool) -> None:
        self.weights = weights
        self.queues = list(weights)
        self.strict = strict or len(self.queues) == 1
        self._by_weight = sorted(self.queues, key=lambda q: -weights[q])
        self.owed: str | None = None  # a queue whose wake token this server took and has not acted on yet
        self.empty: dict[str, float] = {}  # queue -> when a dequeue found it empty
        self.down: dict[str, tuple[float, float]] = {}  # cluster: queue -> (time to try again, backoff)
        self.limited: dict[str, tuple[float, bool]] = {}  # queue -> (time its limits hold until, by concurrency)

    def order(self) -> list[str]:
        """Queues in the order to try (takes the owed queue: it goes first this once)."""
        owed, self.owed = self.owed, None
        order = self._by_weight if self.strict else self._weighted()
        if owed is not None and order[0] != owed:
            order = [owed] + [q for q in order if q != owed]
        return order

    def _weighted(self) -> list[str]:
        names = list(self.queues)
        weights = [self.weights[q] for q in names]
        order = []
        while names:
            i = random.choices(range(len(names)), weights)[0]
            order.append(names.pop(i))
            weights.pop(i)
        return order

    def skip(self, q: str, now: float) -> bool:
        """Whether a dequeue from ``q`` is pointless now (empty a moment ago, held back by its
        limits, or its master unreachable)."""
        marked = self.empty.get(q)
        if marked is not None and now - marked < EMPTY_RECHECK or self.is_down(q, now):
            return True
        held = self.limited.get(q)
        return held is not None and held[0] > now

    def is_down(self, q: str, now: float) -> bool:
        """Whether ``q``'s master is skipped after a failure (cluster)."""
        down = self.down.get(q)
        return down is not None and now < down[0]

    def failed(self, q: str, now: float) -> float:
        """A dequeue from ``q`` could not reach its master: skip it for a backoff of its own
        (doubling, at most 5 s), returned."""
        down = self.down.get(q)
        backoff = min(down[1] * 2, 5.0) if down else 0.05
        self.down[q] = (now + backoff, backoff)
        return backoff

    def took(self, q: str, res: Dequeued, now: float) -> None:
        """Note what a dequeue from ``q`` found: its limits' hold, and whether it is empty."""
        if res.wait_ms:  # the queue's limits hold its tasks back: skip it until then
            self.limited[q] = (now + res.wait_ms / 1000, res.slot_bound)
        else:
            self.limited.pop(q, None)
        if res.remaining <= 0:
            self.empty[q] = now
        else:
            self.empty.pop(q, None)

    def wait_timeout(self, timeout: float, now: float) -> float:
        """``timeout`` for an idle wait, shortened to when a queue's limits let a task through."""
        if self.limited:
            timeout = min(timeout, max(0.001, min(at for at, _ in self.limited.values()) - now))
        return timeout

    def next_up(self, timeout: float, now: float) -> float:
        """``timeout`` shortened to when the next unreachable queue is due to be tried again."""
        if self.down:
            timeout = min(timeout, max(0.01, min(at for at, _ in self.down.values()) - now))
        return timeout

    def woken(self, q: str, by_dequeue: bool) -> None:
        """A wake token of ``q`` arrived. A token for a queue held back by its concurrency limit
        means a slot freed (the script that freed it left the token, includes/slots.lua): its next
        dequeue is owed now, not at the end of the hold (unless ``by_dequeue``: the dequeue that
        rode with the wait just tried it)."""
        self.empty.pop(q, None)
        held = self.limited.get(q)
        if held is not None and held[1] and not by_dequeue:
            del self.limited[q]
