"""Handlers' time limits without a timer per task (issue 45: "a cheaper timeout than a timer per
handler").

Every attempt has a limit (its ``timeout``, its ``deadline``, or the server's ``default_timeout``,
30 minutes), and almost every attempt ends long before it. A timer per attempt (``call_later``, then
``cancel``) cost each task a timer handle pushed on the loop's heap and, once cancelled, the loop's
sweeps of its cancelled handles: ~5 % of a worker's CPU per no-op task. Here a limit within
:data:`HORIZON` gets its timer at once, as before; a later one is only noted, and one tick every
:data:`TICK` seconds (only while such limits are noted) gives each limit that came within
:data:`HORIZON` its own timer, which fires at the limit itself: the same moment as before, never
late, as the tick runs at least ``HORIZON - TICK`` seconds before it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

HORIZON = 2.0
"""A limit this close (seconds) gets its timer at once."""
TICK = 1.0
"""How often the far limits are looked at (seconds), while there are any."""


class Deadlines:
    """The time limits of the handlers running: ``arm(r, remaining)`` when one starts (``None``:
    no limit), ``disarm(r)`` when it ends; ``fire(r)`` is called at a limit that came."""

    def __init__(self, fire: Callable[[Any], None]) -> None:
        self.fire = fire
        self.timers: dict[Any, asyncio.TimerHandle] = {}
        self.far: dict[Any, float] = {}  # r -> its limit (loop time), not within HORIZON when armed
        self._tick: asyncio.TimerHandle | None = None

    def arm(self, r: Any, remaining: float | None) -> None:
        if remaining is None:
            return
        loop = asyncio.get_running_loop()
        if remaining <= HORIZON:
            self.timers[r] = loop.call_later(remaining, self._fired, r)
            return
        self.far[r] = loop.time() + remaining
        if self._tick is None:
            self._tick = loop.call_later(TICK, self._look, loop)

    def disarm(self, r: Any) -> None:
        timer = self.timers.pop(r, None)
        if timer is not None:
            timer.cancel()
        self.far.pop(r, None)

    def _fired(self, r: Any) -> None:
        self.timers.pop(r, None)
        self.fire(r)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give each noted limit that came within HORIZON its timer; tick again while any is left."""
        self._tick = None
        now = loop.time()
        near = [(r, at) for r, at in self.far.items() if at - now <= HORIZON]
        for r, at in near:
            del self.far[r]
            self.timers[r] = loop.call_later(max(0.0, at - now), self._fired, r)
        if self.far:
            self._tick = loop.call_later(TICK, self._look, loop)
