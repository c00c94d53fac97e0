"""Limiter: a named limit shared by every process, for the code inside handlers.

    stripe = Limiter(redis_url, "stripe", rate="25/s", concurrency=5)

    @mux.handle("charge")
    async def charge(task: Task) -> None:
        async with stripe:            # or `with stripe:` in a plain handler
            await call_stripe(task.payload)

Entering takes one token of the rate (a token bucket of ``burst`` tokens) and one of the
``concurrency`` slots, in one script call on Redis; leaving gives the slot back (a holder that
dies gives it back when its ``hold`` runs out). Refused, it raises :class:`RateLimited` with the
time to wait: raised out of a handler, the task waits that long and runs again, without counting
as a failure or using up a retry. With ``wait=True`` it waits instead (at most ``max_wait``
seconds, then RateLimited).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from types import TracebackType
from typing import Any

from .core.errors import InvalidArgumentError, RateLimited
from .core.keys import limit_keys
from .core.limits import acquire_call, parse_rate, release_call
from .redisio.connection import async_client, sync_client
from .redisio.executor import AsyncExecutor, SyncExecutor

__all__ = ["Limiter"]


class Limiter:
    """A named limit (see the module docstring). ``redis``: a URL or a redis-py client (sync or
    asyncio: use ``with`` with a sync one, ``async with`` with an asyncio one; a URL serves both)."""

    def __init__(self, redis: Any, name: str, *, rate: float | str | None = None, burst: int = 1,
                 concurrency: int | None = None, hold: float = 60.0, wait: bool = False,
                 max_wait: float = 30.0) -> None:
        limit_keys(name)  # a bad name fails here
        if rate is None and concurrency is None:
            raise InvalidArgumentError("a Limiter needs a rate, a concurrency, or both")
        self.rate = None if rate is None else parse_rate(rate)
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise InvalidArgumentError(f"burst must be an int >= 1, got {burst!r}")
        if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                        or concurrency < 1):
            raise InvalidArgumentError(f"concurrency must be an int >= 1, got {concurrency!r}")
        for label, value in (("hold", hold), ("max_wait", max_wait)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise InvalidArgumentError(f"{label} must be a number of seconds > 0, got {value!r}")
        self.name, self.burst, self.concurrency = name, burst, concurrency
        self.hold_ms, self.wait, self.max_wait = int(hold * 1000), wait, float(max_wait)
        self._redis = redis
        self._sync: SyncExecutor | None = None
        self._async: AsyncExecutor | None = None
        self._held: list[str] = []  # holders of this object's current entries (nested or concurrent)

    def _call(self, holder: str) -> Any:
        return acquire_call(self.name, self.rate, self.burst, self.concurrency, holder, self.hold_ms)

    def __enter__(self) -> Limiter:
        if self._sync is None:
            self._sync = SyncExecutor(sync_client(self._redis))
        holder, deadline = secrets.token_hex(8), time.monotonic() + self.max_wait
        while True:
            granted, wait_ms = self._sync.run(self._call(holder))
            if granted:
                self._held.append(holder)
                return self
            if not self.wait or time.monotonic() + wait_ms / 1000 > deadline:
                raise RateLimited(wait_ms / 1000, f"limit {self.name!r} reached: retry in {wait_ms / 1000:g}s")
            time.sleep(wait_ms / 1000)

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._held and self.concurrency is not None and self._sync is not None:
            self._sync.run(release_call(self.name, self._held.pop()))
        elif self._held:
            self._held.pop()

    async def __aenter__(self) -> Limiter:
        if self._async is None:
            self._async = AsyncExecutor(async_client(self._redis))
        holder, deadline = secrets.token_hex(8), time.monotonic() + self.max_wait
        while True:
            granted, wait_ms = await self._async.run(self._call(holder))
            if granted:
                self._held.append(holder)
                return self
            if not self.wait or time.monotonic() + wait_ms / 1000 > deadline:
                raise RateLimited(wait_ms / 1000, f"limit {self.name!r} reached: retry in {wait_ms / 1000:g}s")
            await asyncio.sleep(wait_ms / 1000)

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._held and self.concurrency is not None and self._async is not None:
            await self._async.run(release_call(self.name, self._held.pop()))
        elif self._held:
            self._held.pop()
