"""Scheduler: periodic tasks declared in code and run by any number of scheduler processes.

    from asynqpy import Scheduler

    scheduler = Scheduler("redis://localhost:6379/0")
    scheduler.register("nightly-report", "report:build", {"kind": "daily"}, cron="30 2 * * *",
                       tz="Europe/Berlin")
    scheduler.register("heartbeat", "ping", every=30)
    scheduler.run()  # until SIGTERM / Ctrl-C

Entries are stored in Redis (next to their queue's tasks), so ``asynqpy cron ls`` and the
Inspector show them, and operators can pause, resume, run, add and remove entries while schedulers
run. Each tick is enqueued exactly once however many schedulers run (see docs/cron.md).
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from .core.cron.entries import GRACE_MS, Entry, make_entry
from .core.model.clock import Clock
from .core.model.errors import InvalidArgumentError
from .core.model.options import MAX_SECONDS
from .core.security.signing import SigningKeys, make_signer
from .redisio.connection import async_client, check_url
from .redisio.protocol import GuardedAsyncExecutor
from .server import _close_loop, new_event_loop
from .worker.cron import SchedulerParams, Scheduling, entries_of

__all__ = ["Entry", "Scheduler"]


class Scheduler:
    """Runs scheduler entries: the ones :meth:`register` declares, and every entry stored in Redis
    (added by other schedulers, or by operators with ``asynqpy cron add``).

    ``redis``: a URL or a redis-py asyncio client (default ``$ASYNQPY_REDIS_URL``). ``refresh``:
    seconds between two reloads of the stored entries. ``grace``: seconds a tick may be late and
    still be enqueued (older ticks were missed: each entry's ``missed`` policy decides).
    ``signing_key``: as the clients', when tasks are signed: the entries it stores are signed, and
    it fires only stored entries whose signature verifies (docs/cron.md, "Signed entries")."""

    def __init__(self, redis: Any = None, *, refresh: float = 5.0, grace: float = GRACE_MS / 1000,
                 clock: Clock | None = None, signing_key: SigningKeys | None = None,
                 max_payload_bytes: int = 1 << 20) -> None:
        for name, value, low in (("refresh", refresh, 0.01), ("grace", grace, 0.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= MAX_SECONDS:
                raise InvalidArgumentError(f"{name} must be a number of seconds >= {low:g} and at most 100 years, "
                                           f"got {value!r}")
        if isinstance(redis, str):
            check_url(redis)
        self._redis_arg = redis
        self.refresh, self.grace = float(refresh), float(grace)
        self.clock = clock or Clock()
        self._signing_key = signing_key
        make_signer(signing_key)  # a bad key fails here
        self.max_payload_bytes = max_payload_bytes
        self.entries: list[Entry] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def register(self, name: str, task_type: str, payload: Any = None, *, cron: str | None = None,
                 every: float | None = None, tz: str = "UTC", queue: str = "default", missed: str = "skip",
                 **options: Any) -> Entry:
        """Declare an entry: enqueue ``task_type`` with ``payload`` into ``queue`` on each tick of
        ``cron`` (5 fields, or 6 with seconds first, in the IANA time zone ``tz``; needs the
        ``cron`` extra) or ``every`` seconds (aligned to the Unix epoch). ``missed``: ``"skip"``
        ticks missed while no scheduler ran, or run the ``"last"`` one once. ``options``:
        max_retry, timeout, retention, retry_delay, headers. The entry is stored when the
        scheduler starts; an unchanged entry keeps its state (last tick, pause) across restarts."""
        e = make_entry(name, task_type, payload, cron=cron, every=every, tz=tz, queue=queue, missed=missed,
                       max_payload_bytes=self.max_payload_bytes, **options)
        entries_of([*self.entries, e])  # refuses a second entry with that queue and name
        self.entries.append(e)
        return e

    def _params(self) -> SchedulerParams:
        return SchedulerParams(tuple(self.entries), self.refresh, int(self.grace * 1000), self.max_payload_bytes)

    async def arun(self) -> None:
        """Run in the current event loop until :meth:`stop`."""
        from .core.spine.broker import Broker

        redis = async_client(self._redis_arg)
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        loop = Scheduling(GuardedAsyncExecutor(redis), Broker(self.clock, make_signer(self._signing_key)), self.clock,
                          self._params(), self._stop)
        try:
            await loop.run()
        finally:
            if self._redis_arg is None or isinstance(self._redis_arg, str):
                await redis.aclose()

    def run(self, *, loop: str = "asyncio") -> None:
        """Run until SIGTERM or SIGINT (or :meth:`stop`)."""
        event_loop = new_event_loop(loop)

        async def main() -> None:
            task = asyncio.ensure_future(self.arun())
            while self._stop is None and not task.done():
                await asyncio.sleep(0)
            for sig in (signal.SIGTERM, signal.SIGINT):
                asyncio.get_running_loop().add_signal_handler(sig, self.stop)
            await task

        try:
            event_loop.run_until_complete(main())
        finally:
            _close_loop(event_loop)

    def stop(self) -> None:
        """Ask a running scheduler to stop (thread-safe)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
