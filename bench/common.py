"""Shared by the benchmark orchestrator (bench/run.py) and every peer adapter (bench/peers/*.py).
Standard library only: it is imported inside each peer's own virtualenv.

The scoreboard ("board") is a file in /dev/shm mapped into every process. Handlers record there
that they ran and when, so completions are counted without one extra command to the Redis being
measured. Layout (little-endian):

    slots   64 x (count u64, first f64, last f64)   one slot per worker process (claimed by pid)
    pids    64 x i64                                 which process owns each slot
    starts  capacity x f64                           time.time() when task i's handler started
    enq     capacity x f64                           time.time() just before task i was enqueued

Adapter contract: ``python bench/peers/<peer>.py COMMAND --url URL --board PATH [...]`` where
COMMAND is one of

    describe                       print JSON {"name", "version", "config"} (config: how it is set up)
    enqueue --n N --mode single|batch
                                   enqueue N no-op tasks (payload = index i), print JSON {"seconds"}
                                   measured around the enqueue loop only (not imports/connects)
    produce --n N --interval-ms MS [--delay-s D]
                                   for each i: board.mark_enqueued(i); enqueue task i (due D s later
                                   when D > 0); then wait until the next tick of MS milliseconds
    worker --concurrency C [--sleep-ms MS]
                                   consume the queue until SIGTERM/SIGINT; the handler calls
                                   board.hit(i) first, then sleeps MS ms (asyncio.sleep if async)
    worker ... --redis-write       the handler also does one write of its own on the measured Redis
                                   (INCR bench:writes, on the handler's own client), as real handlers
                                   do; an adapter without it prints RESULT {"unsupported": ...}

An adapter starts with :func:`begin` (arguments, ``describe``, logging). Every adapter uses the
queue (or its equivalent) named ``bench`` and a task named ``noop``. The
first line of an adapter that starts with ``# requires:`` lists the pip requirements of its venv.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import mmap
import os
import struct
import threading
import time
from typing import Any

SLOTS = 64
_SLOT = struct.Struct("<Qdd")
_PID = struct.Struct("<q")
HEADER = SLOTS * _SLOT.size + SLOTS * _PID.size


class Board:
    """The shared scoreboard (see the module docstring)."""

    def __init__(self, path: str, capacity: int = 0, create: bool = False) -> None:
        self.path = path
        if create:
            with open(path, "wb") as f:
                f.truncate(HEADER + 16 * capacity)
        self._f = open(path, "r+b")
        size = os.fstat(self._f.fileno()).st_size
        self.capacity = (size - HEADER) // 16
        self._m = mmap.mmap(self._f.fileno(), size)
        self._lock = threading.Lock()
        self._slot = -1
        self._pid = 0

    # -- worker side -----------------------------------------------------------------------------

    def _claim(self) -> int:
        fcntl.flock(self._f.fileno(), fcntl.LOCK_EX)
        try:
            base = SLOTS * _SLOT.size
            for i in range(SLOTS):
                (pid,) = _PID.unpack_from(self._m, base + i * _PID.size)
                if pid == 0:
                    _PID.pack_into(self._m, base + i * _PID.size, os.getpid())
                    return i
            raise RuntimeError("no free board slot")
        finally:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_UN)

    def hit(self, index: Any) -> None:
        """Record that task ``index`` started (thread-safe within a process)."""
        now = time.time()
        with self._lock:
            if self._slot < 0 or self._pid != os.getpid():
                self._pid = os.getpid()
                self._slot = self._claim()
            off = self._slot * _SLOT.size
            count, first, _ = _SLOT.unpack_from(self._m, off)
            _SLOT.pack_into(self._m, off, count + 1, first or now, now)
            try:
                i = int(index)
            except (TypeError, ValueError):
                i = -1
            if 0 <= i < self.capacity // 2:
                struct.pack_into("<d", self._m, HEADER + 8 * i, now)

    def mark_enqueued(self, index: int) -> None:
        struct.pack_into("<d", self._m, HEADER + 8 * (self.capacity // 2) + 8 * index, time.time())

    # -- orchestrator side -----------------------------------------------------------------------

    def count(self) -> int:
        return sum(_SLOT.unpack_from(self._m, i * _SLOT.size)[0] for i in range(SLOTS))

    def span(self) -> tuple[float, float]:
        """(first start, last start) over every worker process."""
        firsts, lasts = [], []
        for i in range(SLOTS):
            count, first, last = _SLOT.unpack_from(self._m, i * _SLOT.size)
            if count:
                firsts.append(first)
                lasts.append(last)
        return (min(firsts), max(lasts)) if firsts else (0.0, 0.0)

    def starts(self, n: int) -> list[float]:
        return list(struct.unpack_from(f"<{n}d", self._m, HEADER))

    def enqueued(self, n: int) -> list[float]:
        return list(struct.unpack_from(f"<{n}d", self._m, HEADER + 8 * (self.capacity // 2)))

    def close(self) -> None:
        self._m.close()
        self._f.close()


def new_board(path: str, tasks: int) -> Board:
    """A zeroed board for ``tasks`` tasks (half the data area for starts, half for enqueue times)."""
    return Board(path, capacity=2 * tasks, create=True)


def adapter_args() -> argparse.Namespace:
    """Parse an adapter's command line (see the module docstring)."""
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["describe", "enqueue", "produce", "worker"])
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--board", default="")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--mode", choices=["single", "batch"], default="single")
    p.add_argument("--interval-ms", type=float, default=20.0)
    p.add_argument("--delay-s", type=float, default=0.0)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--redis-write", action="store_true",
                   help="worker: the handler also INCRs bench:writes on the measured Redis (its own connection)")
    return p.parse_args()


def begin(name: str, version: str, config: str | None, *, one_process: bool = True,
          redis_write: bool = False) -> argparse.Namespace:
    """An adapter's common start: parse its command line; answer ``describe`` and exit; refuse
    ``--processes`` other than 1 where the adapter runs one worker process, and ``--redis-write``
    where its handler has no write of its own (``redis_write=False``: the orchestrator then reports
    the workload as unsupported, never a handler that silently skipped its write); quiet the
    libraries' logging (WARNING) so per-task logs do not slow the measured loop."""
    import logging
    import sys

    a = adapter_args()
    if a.command == "describe":
        emit({"name": name, "version": version, "config": config, "redis_write": redis_write})
        sys.exit(0)
    if one_process and a.processes != 1:
        raise SystemExit(f"the {name} adapter runs one worker process")
    if a.redis_write and not redis_write:
        emit({"unsupported": "--redis-write"})
        sys.exit(0)
    logging.basicConfig(level=logging.WARNING)
    return a


def emit(obj: dict[str, Any]) -> None:
    """Print a JSON result line for the orchestrator."""
    print("RESULT " + json.dumps(obj), flush=True)


def pace(n: int, interval_ms: float, enqueue_one: Any, board: Board) -> None:
    """Call ``enqueue_one(i)`` n times, ``interval_ms`` apart, marking each enqueue time first."""
    start = time.perf_counter()
    for i in range(n):
        target = start + i * interval_ms / 1000
        left = target - time.perf_counter()
        if left > 0:
            time.sleep(left)
        board.mark_enqueued(i)
        enqueue_one(i)
