"""The worker's heap and Python's cyclic garbage collector (docs/workers.md, "Pauses of the
garbage collector").

A full collection walks every object the process tracks, and the whole event loop waits for it: a
worker's ~60 000 objects (most of them its modules' functions, types and descriptors, which never
die) took 57-72 ms on the 2-core VM, one every 1-3 s in a burst of work, each a pause of every
handler and of the forwarder (a due timer's move waited it out: issue 46's timers). Once the
worker is warm (its first task ended: the modules its handlers import on their first run are
loaded), it collects once and freezes what is left (``gc.freeze``): later full collections walk
only what was made since (8-18 ms in the same burst). Once per process (a second server in it
finds the heap frozen). The price: a frozen object that later ends in a reference cycle is never
collected (one still freed by its reference count is); what was alive at that moment and dies in
a cycle later (the objects of the tasks running then) stays, once. So only a process that is a
worker and nothing else does it: ``asynqpy worker`` sets ``freeze_heap`` (it also freezes its
start-up, cli/main.py); a ``Server`` embedded in an application leaves its heap alone unless
told (``freeze_heap=True``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger("asynqpy.server")

_FROZEN = [False]  # (once per process: the first warm server freezes)


class HeapFreeze:
    """Freezes the heap once its worker is warm (see the module docstring); ``enabled``: the
    server's ``freeze_heap``."""

    def __init__(self, enabled: bool) -> None:
        self.pending = enabled and not _FROZEN[0]

    def task_ended(self) -> None:
        """An attempt ended: the first one freezes the heap, after the current turn of the loop."""
        if self.pending:
            self.pending = False
            asyncio.get_running_loop().call_soon(freeze)


def freeze() -> None:
    """Collect the garbage, then freeze the objects left (once per process)."""
    if _FROZEN[0]:
        return
    _FROZEN[0] = True
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.debug("the heap is frozen once warm: %d objects, %.1f ms", gc.get_freeze_count(),
              (time.perf_counter() - started) * 1000)
