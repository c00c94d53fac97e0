"""Which queue the processor's next dequeue tries, and which it skips for now (no I/O); and
:class:`Cadence`, when a per-queue chore (forward, recover, expire) next looks at each queue.

:meth:`QueueOrder.order` lists the queues by weight (``strict_priority``) or weighted-random (the
default: a weighted sample without replacement, each queue keyed by an exponential draw of rate
its weight, O(K log K)), a queue whose wake token this server took and has not acted on yet
(``owed``) first. :meth:`QueueOrder.first` draws only the first choice among some queues (O(n)).
On a single server the processor tries only the queues it knows have tasks (``backlog``: the last
dequeue left some, or it took the queue's wake token), never every queue: a queue with work has a
token waiting, which the idle wait, or a non-blocking poll of the other queues' wake lists while
busy, pops.
:meth:`QueueOrder.skip` passes over, for a while, a queue found empty (:data:`EMPTY_RECHECK`,
while other queues keep the server busy), one whose limits hold its tasks back (until the dequeue
said), and, on a cluster, one whose master could not be reached (with a backoff of its own).

A wake token is a hint a server can lose (the reply of the BLPOP or LMPOP that popped it lost, the
server killed between the pop and the dequeue), and some work announces none (a task set aside
for a newer worker). So a server fetching by token also scans its queues (:meth:`QueueOrder.scan`):
one queue after the other, each at least every ``max(base, K / SCAN_PER_S)`` s, goes into the
backlog whatever the tokens say, and the queues new to it (all of them at its start) are looked
at once for tasks held for its version (:attr:`QueueOrder.fresh`).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from fnmatch import fnmatchcase

from ..core.spine.broker import Dequeued
from ..core.spine.keys import is_queue_pattern

EMPTY_RECHECK = 0.1
"""Seconds a queue found empty is skipped while other queues keep the server busy."""

FEW_QUEUES = 4
"""A server serving at most this many queues keeps the small-scale behaviour: a fetch tries every
queue not found empty in the last :data:`EMPTY_RECHECK` s, a dequeue rides with the idle wait, and
each chore looks at every queue at its own interval (as before issue 31)."""

COLD_CHECKS_PER_S = 0.5
"""Cold checks (one ``EXISTS`` each) a chore of a server (forwarding, recovering, expiring) makes
per second at most, all its queues together (:class:`Cadence`)."""


SCAN_PER_S = COLD_CHECKS_PER_S
"""Queues a server fetching by wake token dequeues per second at most whatever the tokens say
(:meth:`QueueOrder.scan`): a queue whose token was lost, or whose work no token announced, is
dequeued within ``max(idle_timeout, K / SCAN_PER_S)`` s by each server of it."""


class ServedQueues:
    """The queues a server serves and their weights: the names it was given, and, for each
    pattern it was given (``tenant-*``), every known queue that matches, present or future. The
    one place the served set lives: the processor is told when it changes
    (:meth:`~asynqpy.worker.processor.Processor.serve`), and each per-queue chore compares
    :attr:`version` at its next pass. A name given as such wins over a pattern; among patterns the
    first given that matches gives the weight. A queue a pattern brought in is dropped when it is
    no longer known (``Inspector.drop_queue``); a name given is served always."""

    def __init__(self, spec: Mapping[str, int]) -> None:
        self.fixed = {q: w for q, w in spec.items() if not is_queue_pattern(q)}
        self.patterns = [(p, w) for p, w in spec.items() if is_queue_pattern(p)]
        self.current: dict[str, int] = dict(self.fixed)
        self.version = 0

    def weight_of(self, name: str) -> int | None:
        """The weight ``name`` is served with, or None if it is not served."""
        if name in self.fixed:
            return self.fixed[name]
        return next((w for p, w in self.patterns if fnmatchcase(name, p)), None)

    def replace(self, known: Iterable[str]) -> tuple[list[str], list[str]]:
        """The known queues are ``known``: serve those the patterns match, drop the matched ones
        no longer known. Returns (added, dropped), sorted; :attr:`version` grows if either is not
        empty."""
        new = dict(self.fixed)
        for q in known:
            if q not in new:
                w = self.weight_of(q)
                if w is not None:
                    new[q] = w
        added = sorted(new.keys() - self.current.keys())
        dropped = sorted(self.current.keys() - new.keys())
        if added or dropped:
            self.current = new
            self.version += 1
        return added, dropped


class Backlog(set[str]):
    """The queues known to have tasks (:attr:`QueueOrder.backlog`): a set that also notes the
    queues that join it (:attr:`joined`), so the race of :meth:`QueueOrder.candidates` keys only
    those, not every queue of the backlog at each fetch."""

    def __init__(self) -> None:
        super().__init__()
        self.joined: list[str] = []

    def add(self, q: str) -> None:
        if q not in self:
            super().add(q)
            self.joined.append(q)

    def update(self, *others: Iterable[str]) -> None:
        for other in others:
            for q in other:
                self.add(q)


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
        self.backlog = Backlog()  # queues known to have tasks: the last dequeue left some, or a token said
        self.fresh: set[str] = set(self.queues)  # queues new to this server, not looked at yet (scan)
        self._race: dict[str, float] = {}  # backlog queue -> its key in the race (candidates; strict: -weight)
        self._heap: list[tuple[float, str]] = []  # (key, queue) of the race; an entry _race no longer holds is stale
        self._race_at = 0.0  # the key of the queue the race picked last (took)
        self._scan_every = float("inf")  # seconds between two queues of the scan (scan_from)
        self._scan_at = float("inf")  # loop time the scan's next queue is due
        self._scan_i = 0

    def scan_from(self, base: float, now: float) -> None:
        """Scan the queues from ``now`` on (:meth:`scan`): each every ``max(base, K /
        SCAN_PER_S)`` s, the first due one such interval divided by K from now."""
        k = len(self.queues)
        if k:
            self._scan_every = max(base, k / SCAN_PER_S) / k
            self._scan_at = now + self._scan_every
            self._scan_i = random.randrange(k)

    def scan(self, now: float) -> None:
        """Put the scan's due queue, if any, in the backlog: the next fetch dequeues it whether a
        token named it or not (one at most: a server busy for long does not catch up in a burst)."""
        if now >= self._scan_at:
            self._scan_at = now + self._scan_every
            self._scan_i = (self._scan_i + 1) % len(self.queues)
            q = self.queues[self._scan_i]
            self.empty.pop(q, None)
            self.backlog.add(q)

    def scan_in(self, now: float) -> float:
        """Seconds until the scan's next queue is due."""
        return max(0.0, self._scan_at - now)

    def order(self) -> list[str]:
        """Queues in the order to try (takes the owed queue: it goes first this once)."""
        owed, self.owed = self.owed, None
        order = self._by_weight if self.strict else self._weighted()
        if owed is not None and order[0] != owed:
            order = [owed] + [q for q in order if q != owed]
        return order

    def _weighted(self) -> list[str]:
        # Efraimidis-Spirakis: sorting by Exp(weight) draws is a weighted sample without replacement
        # (the first is queue q with probability w_q / sum(w), and so on among those left)
        w, draw = self.weights, random.expovariate
        return sorted(self.queues, key=lambda q: draw(w[q]))

    def ranked(self, queues: Iterable[str]) -> list[str]:
        """``queues`` in the order to try: by weight (strict) or a weighted-random order."""
        if self.strict:
            return sorted(queues, key=lambda q: -self.weights[q])
        w, draw = self.weights, random.expovariate
        return sorted(queues, key=lambda q: draw(w[q]))

    def first(self, queues: Iterable[str] | None = None) -> str | None:
        """Only the first choice among ``queues`` (default: every queue), O(n): the heaviest
        (strict), or one drawn with probability proportional to its weight."""
        pool = self.queues if queues is None else queues
        if self.strict:
            return min(pool, key=lambda q: -self.weights[q], default=None)
        w, draw = self.weights, random.expovariate
        return min(pool, key=lambda q: draw(w[q]), default=None)

    def candidates(self, now: float) -> list[str]:
        """The queues a fetch tries (single server), in order: those known to have tasks (the owed
        one among them, taken) that are not skipped, by weight or weighted-random. The fetcher
        takes them one at a time (:meth:`next_candidate`); this lists them all.

        Weighted-random as a race (a backlog of many queues is ranked at each fetch): each queue
        in the backlog keeps a key, the last picked one's plus an exponential draw of rate its
        weight, drawn when it joins the backlog or after a dequeue of it (:meth:`took`); the
        smallest key goes first. Exponential draws being memoryless, the next queue is each with
        probability proportional to its weight, as a fresh weighted sample would give, for one
        draw a dequeue rather than one per queue of the backlog."""
        self._sync(now)
        keys = sorted((key, q) for q, key in self._race.items() if q in self.backlog)
        return [q for _, q in keys if not self.skip(q, now)]

    def next_candidate(self, now: float, tried: Collection[str] = ()) -> str | None:
        """The first of :meth:`candidates` not in ``tried`` (None: none left), O(log n) a queue
        passed over (issue 45: the race's keys are a heap, so a fetch of a backlog of K / 64
        queues no longer ranks them all)."""
        self._sync(now)
        heap, race, backlog, aside, found = self._heap, self._race, self.backlog, [], None
        while heap:
            key, q = heap[0]
            if race.get(q) != key or q not in backlog:  # stale: re-keyed, or left the backlog
                heapq.heappop(heap)
                if race.get(q) == key:
                    del race[q]
                continue
            if q in tried or self.skip(q, now):
                aside.append(heapq.heappop(heap))
                continue
            found = q
            break
        for entry in aside:
            heapq.heappush(heap, entry)
        return found

    def each_candidate(self, clock: Callable[[], float]) -> Iterator[str]:
        """:meth:`next_candidate` after :meth:`next_candidate`, each taken as the fetch asks for
        it (at ``clock()`` then), until none is left."""
        tried: set[str] = set()
        while (q := self.next_candidate(clock(), tried)) is not None:
            tried.add(q)
            yield q

    def _sync(self, now: float) -> None:
        """The owed queue and the scan's due one join the backlog; each queue that joined it
        since gets its key in the race (or keeps the one it has)."""
        owed, self.owed = self.owed, None
        if owed is not None:
            self.backlog.add(owed)
        self.scan(now)
        joined, self.backlog.joined = self.backlog.joined, []
        w, draw, race, at = self.weights, random.expovariate, self._race, self._race_at
        for q in joined:
            if q in self.backlog and q not in race:
                key = -w[q] if self.strict else at + draw(w[q])
                race[q] = key
                heapq.heappush(self._heap, (key, q))
        if len(self._heap) > 4 * len(race) + 64:  # stale entries piled up: rebuild
            self._heap = [(key, q) for q, key in race.items()]
            heapq.heapify(self._heap)

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
        """Note what a dequeue from ``q`` found: its limits' hold, and whether it is empty (and
        that it ran in the race of :meth:`candidates`: its key is drawn again)."""
        picked = self._race.pop(q, None)
        if picked is not None and picked > self._race_at and not self.strict:
            self._race_at = picked
        if res.wait_ms:  # the queue's limits hold its tasks back: skip it until then
            self.limited[q] = (now + res.wait_ms / 1000, res.slot_bound)
        else:
            self.limited.pop(q, None)
        if res.remaining <= 0:
            self.empty[q] = now
            self.backlog.discard(q)
        else:
            self.empty.pop(q, None)
            self.backlog.add(q)  # (a queue its limits hold back is skipped until the hold ends)
            self.backlog.joined.append(q)  # (its key is drawn again: _sync)

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


SOON_GRID = 4
"""A queue a server took tasks of is looked at (:meth:`Cadence.soon`) between ``base`` and
``base`` / SOON_GRID s before ``base`` s from then: the looks of the queues taken meanwhile share
a pass."""


class Cadence:
    """When a per-queue chore (forwarding, recovering expired leases, expiring completed tasks)
    next looks at each queue: at the time the queue's last call said something falls due (at
    most ``base`` seconds on), or, for a queue that had nothing, when it is due for a cold check.

    A cold check comes every ``base`` seconds for a few queues (:data:`FEW_QUEUES`), but the cold
    checks of more queues together are spread to at most ``rate`` per second: a server serving K
    queues checks each cold one every ``max(base, K / rate)`` seconds (randomly spread), so an idle server's
    commands per second do not grow with K. What becomes due in between is said by a signal (a
    tick, a wake token, the server's own dequeue) through :meth:`now`. Every queue is due at
    start (one pass)."""

    def __init__(self, queues: Iterable[str], base: float, rate: float, start: float = 0.0) -> None:
        self.queues = list(queues)
        self.version = 0  # the ServedQueues version these queues are (worker/chores.py)
        self.base, self.rate = base, rate
        self.cold_period = base if len(self.queues) <= FEW_QUEUES else max(base, len(self.queues) / rate)
        self._at: dict[str, float] = {q: start for q in self.queues}
        self._heap: list[tuple[float, str]] = [(start, q) for q in self.queues]
        heapq.heapify(self._heap)
        self.cold: set[str] = set(self.queues)  # queues whose last look found nothing (or none yet)

    def due(self, now: float) -> list[str]:
        """The queues due now (each is then off the schedule until :meth:`at` or :meth:`idle`)."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            t, q = heapq.heappop(heap)
            if self._at.get(q) == t:
                del self._at[q]
                out.append(q)
        return out

    def at(self, q: str, when: float) -> None:
        """Look at ``q`` at ``when`` (or earlier, if it is due sooner already); it is not cold."""
        self.cold.discard(q)
        self._set(q, when)

    def now(self, q: str, now: float) -> None:
        """Something of ``q`` fell due (a signal): look at it at once."""
        self.cold.discard(q)
        self._set(q, now)

    def soon(self, q: str, now: float) -> None:
        """``q`` has activity (this server took tasks of it): look at it within ``base`` s. It
        stays cold: that look starts with the cold check (one ``EXISTS``, batched with the other
        queues due), as the tasks taken are likely done by then (issue 45: starting over 10^4
        one-task queues, a script call per queue was ~0.85 round trip a task). The time is
        floored to a grid of ``base`` / :data:`SOON_GRID`, so that the queues taken in one such
        stretch are looked at in one pass, one round trip, not one a queue."""
        if q in self.cold:
            grid = self.base / SOON_GRID
            self._set(q, max(now, (now + self.base) // grid * grid))

    def idle(self, q: str, now: float) -> None:
        """``q`` had nothing: look again at its next cold check (spread at random)."""
        self.cold.add(q)
        self._set(q, now + self.cold_period * random.uniform(0.5, 1.5) if self.cold_period > self.base
                  else now + self.base)

    def again(self, queues: Iterable[str], when: float) -> None:
        """Look at ``queues`` again at ``when`` (a pass over them failed before it was done)."""
        for q in queues:
            self._set(q, when)

    def resize(self, queues: Iterable[str], now: float) -> None:
        """Serve ``queues`` from now on: a new one is due at once (cold: its first look is one
        ``EXISTS``), one no longer served is forgotten; the others keep their schedule."""
        served = list(queues)
        for q in set(self.queues) - set(served):
            self._at.pop(q, None)  # (its heap entries are skipped: _at no longer names them)
            self.cold.discard(q)
        for q in served:
            if q not in self._at and q not in self.queues:
                self.cold.add(q)
                self._set(q, now)
        self.queues = served
        self.cold_period = self.base if len(served) <= FEW_QUEUES else max(self.base, len(served) / self.rate)

    def _set(self, q: str, when: float) -> None:
        old = self._at.get(q)
        if old is None or when < old:
            self._at[q] = when
            heapq.heappush(self._heap, (when, q))

    def next_in(self, now: float) -> float:
        """Seconds until the next queue is due (``inf``: none scheduled)."""
        heap = self._heap
        while heap and self._at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return max(0.0, heap[0][0] - now) if heap else float("inf")
