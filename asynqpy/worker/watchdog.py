"""The event-loop watchdog: warns when a server's event loop was blocked.

A server runs every handler of one process on one asyncio loop. A blocking call inside an
``async def`` handler (``time.sleep``, a synchronous HTTP client, CPU-heavy work) stops that loop:
every other task of the process, lease renewal and fetching wait until it returns, silently. The
loop ticks every ``threshold / 4`` seconds; a thread checks the ticks, and when the loop has not
ticked for longer than ``threshold`` it notes which asyncio task was running and where (the
innermost frame of the loop's thread). When the loop runs again it logs one warning with the
block's length and its culprit; a block still going on after ``HANG`` seconds is reported at once.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import Any

log = logging.getLogger("asynqpy.watchdog")

HANG = 10.0
"""A block this long is reported while it goes on (the loop may never come back)."""


class LoopWatchdog:
    """Watches ``loop`` (the server's) from a daemon thread; ``held`` maps (queue, id) to what the
    server runs (objects with ``id``, ``queue`` and ``msg.type``), to name a task's type."""

    def __init__(self, loop: asyncio.AbstractEventLoop, held: dict[Any, Any], threshold: float | None) -> None:
        self.loop = loop
        self.held = held
        self.threshold = threshold
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._handle: asyncio.TimerHandle | None = None
        self._thread_id = threading.get_ident()

    def start(self) -> None:
        """Start watching (call from the loop's thread)."""
        if self.threshold is None:
            return
        self._thread_id = threading.get_ident()
        self._tick()
        threading.Thread(target=self._watch, name="asynqpy-watchdog", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()

    def _tick(self) -> None:
        self._last = time.monotonic()
        assert self.threshold is not None
        self._handle = self.loop.call_later(self.threshold / 4, self._tick)

    def _watch(self) -> None:
        assert self.threshold is not None
        blocked_since: float | None = None
        culprit = ""
        reported = False
        while not self._stop.wait(self.threshold / 4):
            last = self._last
            lag = time.monotonic() - last
            if blocked_since is None:
                if lag > self.threshold:
                    blocked_since, culprit, reported = last, self._culprit(), False
                continue
            if last != blocked_since:  # the loop ran again
                log.warning("the event loop was blocked for %.2fs by %s: every other task of this server "
                            "waited. A blocking call in an `async def` handler stalls the whole worker: make it a "
                            "plain `def` handler (run in a thread) or await asyncio.to_thread(...) "
                            "(docs/workers.md, \"Handlers that block the event loop\")", last - blocked_since, culprit)
                blocked_since = None
            elif lag > HANG and not reported:
                reported = True
                log.warning("the event loop has been blocked for %.0fs by %s", lag, culprit)

    def _culprit(self) -> str:
        """What the loop is running now: the task (type and id) and the innermost frame."""
        where = ""
        frame = sys._current_frames().get(self._thread_id)
        if frame is not None:
            top = traceback.extract_stack(frame, limit=1)
            if top:
                where = f" at {top[-1].filename}:{top[-1].lineno} in {top[-1].name}"
        try:
            task = asyncio.current_task(self.loop)
        except RuntimeError:
            task = None
        name = task.get_name() if task is not None else ""
        if name.startswith("asynqpy-task-"):
            id = name[len("asynqpy-task-"):]
            for r in list(self.held.values()):
                if r.id == id:
                    return f"task type={r.msg.type} id={id} queue={r.queue}{where}"
        return f"{name or 'the event loop'}{where}"
