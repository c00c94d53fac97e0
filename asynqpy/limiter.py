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

Each entry releases exactly its own slot: the holder id of an entry is kept in a context variable
(one stack per asyncio task or thread, innermost entry last), so one Limiter shared by concurrent
tasks and threads (a module-level Limiter, as above) gives back, on each exit, the slot that this
task or thread took, never another's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from contextvars import ContextVar
from types import TracebackType
from typing import Any

from .core.limits.plans import acquire_call, parse_rate, release_call
from .core.model.errors import InvalidArgumentError, RateLimited
from .core.spine.keys import limit_keys
from .redisio.connection import async_client, sync_client
from .redisio.executor import AsyncExecutor, SyncExecutor

__all__ = ["Limiter"]

log = logging.getLogger("asynqpy.limiter")

_HELD: ContextVar[tuple[tuple[int, str], ...]] = ContextVar("asynqpy_limiter_held", default=())
"""The places held in this context (an asyncio task or a thread): (the Limiter's serial, the
holder id), innermost last. Tuples: a task started inside an entry gets a copy it cannot change."""
_SERIALS = itertools.count(1)


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
        self._serial = next(_SERIALS)  # tells this Limiter's entries in _HELD from others'

    def _call(self, holder: str) -> Any:
        return acquire_call(self.name, self.rate, self.burst, self.concurrency, holder, self.hold_ms)

    def _push(self, holder: str) -> None:
        _HELD.set((*_HELD.get(), (self._serial, holder)))

    def _pop(self) -> str | None:
        """The holder of this context's innermost entry of this Limiter (taken off the stack)."""
        held = _HELD.get()
        for i in range(len(held) - 1, -1, -1):
            if held[i][0] == self._serial:
                _HELD.set(held[:i] + held[i + 1:])
                return held[i][1]
        log.warning("limit %r: leaving an entry not made in this task or thread; its slot is given back "
                    "when its hold runs out", self.name)
        return None

    def __enter__(self) -> Limiter:
        if self._sync is None:
            self._sync = SyncExecutor(sync_client(self._redis))
        holder, deadline = secrets.token_hex(8), time.monotonic() + self.max_wait
        while True:
            granted, wait_ms = self._sync.run(self._call(holder))
            if granted:
                self._push(holder)
                return self
            if not self.wait or time.monotonic() + wait_ms / 1000 > deadline:
                raise RateLimited(wait_ms / 1000, f"limit {self.name!r} reached: retry in {wait_ms / 1000:g}s")
            time.sleep(wait_ms / 1000)

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        holder = self._pop()
        if holder is not None and self.concurrency is not None and self._sync is not None:
            self._sync.run(release_call(self.name, holder))

    async def __aenter__(self) -> Limiter:
        if self._async is None:
            self._async = AsyncExecutor(async_client(self._redis))
        holder, deadline = secrets.token_hex(8), time.monotonic() + self.max_wait
        while True:
            granted, wait_ms = await self._async.run(self._call(holder))
            if granted:
                self._push(holder)
                return self
            if not self.wait or time.monotonic() + wait_ms / 1000 > deadline:
                raise RateLimited(wait_ms / 1000, f"limit {self.name!r} reached: retry in {wait_ms / 1000:g}s")
            await asyncio.sleep(wait_ms / 1000)

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        holder = self._pop()
        if holder is not None and self.concurrency is not None and self._async is not None:
            await self._async.run(release_call(self.name, holder))
