"""The dashboard's state machine (which view, which queue, state tab and page) and its throughput
sampler. Pure: keys and snapshots in, state out; no terminal, no Redis."""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asynqpy.core.model.task import TaskState

if TYPE_CHECKING:
    from asynqpy import QueueInfo

STATES: list[TaskState] = [s for s in TaskState if s not in (TaskState.AGGREGATING, TaskState.TARGETED,
                                                                TaskState.WAITING, TaskState.BLOCKED)]
"""The states the queue table has a column for (aggregating tasks are listed per group: the queue
summary counts them)."""

TABS: list[TaskState] = [*STATES, TaskState.WAITING, TaskState.BLOCKED]
"""The queue view's task tabs in order (keys 1-8): the table's states, then the tasks waiting on
their parents (``after=``) and those blocked behind their key (``key=``)."""

QUIT_KEYS = ("q", "ctrl-c", "eof")


class View(enum.Enum):
    QUEUES = "queues"
    QUEUE = "queue"


def pages(q: QueueInfo | None, state: TaskState, page_size: int) -> int:
    """How many pages the tasks of ``state`` in queue ``q`` fill (at least 1)."""
    n: int = getattr(q, state.value) if q is not None else 0
    return max(1, math.ceil(n / page_size))


@dataclass
class DashState:
    """Where the user is. ``cursor``: the selected queue in the queue table; ``queue``, ``tab``,
    ``page``: what the queue view shows; ``page_size`` follows the terminal's height."""

    view: View = View.QUEUES
    cursor: str | None = None
    queue: str | None = None
    tab: TaskState = TaskState.PENDING
    page: int = 1
    page_size: int = 10
    help: bool = False
    quit: bool = False
    redraw: bool = False

    def want(self) -> tuple[str, TaskState, int, int] | None:
        """The task page the queue view needs: (queue, state, page, page size); None elsewhere."""
        if self.view is not View.QUEUE or self.queue is None:
            return None
        return self.queue, self.tab, self.page, self.page_size

    def sync(self, queues: Sequence[QueueInfo]) -> None:
        """Keep the state valid for the queues that exist now: a cursor on a vanished queue moves to
        its neighbour, an open queue that vanished goes back to the table, a page past the end
        moves to the last page."""
        names = [q.queue for q in queues]
        if self.cursor not in names:
            after = [n for n in names if self.cursor is None or n > self.cursor]
            self.cursor = after[0] if after else (names[-1] if names else None)
        if self.view is View.QUEUE:
            q = next((x for x in queues if x.queue == self.queue), None)
            if q is None:
                self.view = View.QUEUES
                return
            self.page = max(1, min(self.page, pages(q, self.tab, self.page_size)))

    def handle(self, key: str, queues: Sequence[QueueInfo]) -> None:
        """Apply one key (a name from :class:`cli.terminal.KeyDecoder`)."""
        if key in QUIT_KEYS:
            self.quit = True
        elif key == "ctrl-l":
            self.redraw = True
        elif self.help:
            self.help = False
        elif key == "?":
            self.help = True
        elif self.view is View.QUEUES:
            self._queues_key(key, [q.queue for q in queues])
        else:
            self._queue_key(key, next((x for x in queues if x.queue == self.queue), None))

    def _queues_key(self, key: str, names: list[str]) -> None:
        if not names:
            return
        i = names.index(self.cursor) if self.cursor in names else 0
        moves = {"up": i - 1, "k": i - 1, "down": i + 1, "j": i + 1, "home": 0, "g": 0,
                 "end": len(names) - 1, "G": len(names) - 1}
        if key in moves:
            self.cursor = names[max(0, min(len(names) - 1, moves[key]))]
        elif key in ("enter", "right", "l"):
            self.cursor = names[i]
            self.view, self.queue, self.tab, self.page = View.QUEUE, names[i], TaskState.PENDING, 1

    def _queue_key(self, key: str, q: QueueInfo | None) -> None:
        i = TABS.index(self.tab)
        if key in ("esc", "backspace"):
            self.view = View.QUEUES
            return
        tab = {"left": i - 1, "h": i - 1, "right": i + 1, "l": i + 1, "tab": i + 1}.get(key)
        if tab is not None:
            self.tab, self.page = TABS[tab % len(TABS)], 1
        elif len(key) == 1 and "1" <= key <= str(len(TABS)):
            self.tab, self.page = TABS[int(key) - 1], 1
        elif key in ("n", "pagedown"):
            self.page = min(self.page + 1, pages(q, self.tab, self.page_size))
        elif key in ("p", "pageup"):
            self.page = max(1, self.page - 1)
        elif key in ("home", "g"):
            self.page = 1
        elif key in ("end", "G"):
            self.page = pages(q, self.tab, self.page_size)


class Throughput:
    """Succeeded and failed attempts per second per queue over the last ``window`` seconds, from the
    queues' lifetime counters sampled at each refresh (they only grow, so a rate is a difference
    of two samples over the time between them)."""

    def __init__(self, window: float = 60.0) -> None:
        self.window = window
        self._samples: dict[str, deque[tuple[float, int, int]]] = {}

    def add(self, now: float, infos: Iterable[QueueInfo]) -> None:
        """Record one sample per queue taken at ``now`` (a monotonic time in seconds)."""
        seen = set()
        for q in infos:
            seen.add(q.queue)
            d = self._samples.setdefault(q.queue, deque())
            if d and (q.processed_total < d[-1][1] or q.failed_total < d[-1][2]):
                d.clear()  # the counters went back: the queue was removed and made again
            d.append((now, q.processed_total, q.failed_total))
            while len(d) > 2 and d[1][0] <= now - self.window:
                d.popleft()  # keep one sample at or before the window's start
        for gone in set(self._samples) - seen:
            del self._samples[gone]

    def rates(self, queue: str) -> tuple[float, float] | None:
        """(succeeded/s, failed/s) over the window, None before two samples exist. The processed
        counter counts every finished attempt, failures included: succeeded = processed - failed."""
        d = self._samples.get(queue)
        if not d or len(d) < 2:
            return None
        (t0, p0, f0), (t1, p1, f1) = d[0], d[-1]
        if t1 <= t0:
            return None
        failed = f1 - f0
        return max(0, p1 - p0 - failed) / (t1 - t0), failed / (t1 - t0)
