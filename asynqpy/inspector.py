"""Inspector and AsyncInspector: read queues, tasks and servers, and control them.

Every method but :meth:`Inspector.events` is written once, as a plan of
:class:`~asynqpy.core.inspector.plans.InspectorPlans` (:mod:`asynqpy.core.spine.twin`): the sync class
runs each round trip with a blocking pipeline, the async one awaits it. Every call is O(1) or
O(page size) in Redis work whatever the queue depth; bulk operations go in bounded batches (see
docs/internals-scripts.md, "Operator actions").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from types import TracebackType
from typing import Any

from .core.durable.operating import DurableInspectorPlans
from .core.inspector import search as _search
from .core.inspector.inspection import DailyStats, GroupInfo, QueueInfo
from .core.inspector.plans import InspectorPlans
from .core.limits.plans import QueueLimits
from .core.model.clock import Clock
from .core.model.task import TaskInfo
from .core.results import events as ev
from .core.results.events import TaskEvent
from .core.security.signing import SigningKeys
from .core.server.record import ServerInfo, WorkerInfo
from .core.spine.broker import Call
from .core.spine.twin import Async, Sync
from .redisio.connection import async_client, is_cluster, read_timeout, sync_client
from .redisio.executor import AsyncExecutor, SyncExecutor
from .redisio.protocol import ReaderAsyncExecutor, ReaderSyncExecutor
from .worker.blobs import check_store

__all__ = ["AsyncInspector", "DailyStats", "GroupInfo", "Inspector", "QueueInfo", "QueueLimits", "ServerInfo",
           "WorkerInfo"]


class _Facade(DurableInspectorPlans, InspectorPlans):
    """What the two inspectors share: the connection and its executor. A step's reply is a value
    (Inspector) or an awaitable of it (AsyncInspector)."""

    _connect: Callable[[Any], Any]
    _executor: Callable[[Any], Any]

    def __init__(self, redis: Any = None, *, clock: Clock | None = None,
                 signing_key: SigningKeys | None = None, encryption: Any = None, offload: Any = None) -> None:
        super().__init__(clock, signing_key, encryption, check_store(offload))
        self.redis = self._connect(redis)
        self._owns = redis is None or isinstance(redis, str)
        self._exec = self._executor(self.redis)
        self._plans.cluster = is_cluster(self.redis)  # queues read together must then share a slot

    def _step(self, step: Any) -> Any:
        return self._exec.run(step) if isinstance(step, Call) else self._exec.run_many(step)


class Inspector(_Facade, Sync):
    """Synchronous inspection and control. ``redis``: a URL or a redis-py client (default
    ``$ASYNQPY_REDIS_URL``). Unknown queues raise QueueNotFoundError, unknown task ids
    TaskNotFoundError, an action the task's state forbids TaskStateError. Usable as a context
    manager (closes the client it made). With signed tasks, give it the ``signing_key`` (as the
    client's) so the message it rewrites when cancelling a task stays signed. With encrypted tasks,
    give it the ``encryption`` key ring: payloads, results and logs are shown decrypted (without
    it, as :class:`~asynqpy.core.security.encryption.Encrypted`: "encrypted"). With offloaded
    payloads, give it the blob store (``offload=``): they are shown read from it (without it, as
    :class:`~asynqpy.core.offload.refs.Offloaded`: docs/offload.md), then decrypted."""

    _connect, _executor = staticmethod(sync_client), ReaderSyncExecutor  # checks the protocol
    _exec: SyncExecutor

    def search(self, queue: str, *, limit: int | None = None, cursor: int = 0, budget: int = _search.BUDGET,
               **conditions: Any) -> Iterator[TaskInfo]:
        """The queue's tasks that match every condition given, as they are found: ``state`` (one
        or several), ``type``, ``tenant``, ``payload`` (a dotted path -> its value, or ``...``
        for any value: ``{"user.id": 42, "coupon": ...}``), ``text`` (a substring of the encoded
        payload), ``error`` (of the last error), ``header`` (name -> value), ``since``/``until``
        (enqueued, a datetime or Unix seconds). Read in bounded steps (lua/search.lua: each looks
        at about ``budget`` tasks in Redis, a few ms), up to ``limit`` matches; stop early by
        leaving the loop. :meth:`search_page` resumes from a cursor, :meth:`search_count`
        counts, :meth:`search_act` acts on the matches. See docs/search.md."""
        scan = _search.Scan(queue, _search.make_search(**conditions), cursor, limit, budget, ring=self.broker.ring)
        while not scan.done:
            yield from self._drive(self._answer(_search.step_plan(scan, self._plans._now())))

    def events(self, queue: str, *, since: datetime | float | str | None = None,
               follow: bool = False) -> Iterator[TaskEvent]:
        """The queue's lifecycle events, oldest first: the ones kept since ``since`` (None = all
        kept; a datetime or Unix seconds; an event's ``stream_id`` = the events after it), then
        with ``follow`` the new ones as they happen (a blocking read, no polling; stop by leaving
        the loop). A queue whose stream is off (:meth:`set_events`) has none."""
        reader = ev.Reader(queue, since, follow, block_ms=_block_ms(self.redis))
        while not reader.done:
            yield from reader.feed(self._exec.run(reader.call()))

    def close(self) -> None:
        """Give the connection back to the pool; close the Redis client if this made it."""
        self._exec.close()
        if self._owns:
            self.redis.close()

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AsyncInspector(_Facade, Async):
    """The asyncio twin of :class:`Inspector`: the same methods, awaited."""

    _connect, _executor = staticmethod(async_client), ReaderAsyncExecutor
    _exec: AsyncExecutor

    async def search(self, queue: str, *, limit: int | None = None, cursor: int = 0, budget: int = _search.BUDGET,
                     **conditions: Any) -> AsyncIterator[TaskInfo]:
        """See :meth:`Inspector.search` (``async for task in inspector.search(...)``)."""
        scan = _search.Scan(queue, _search.make_search(**conditions), cursor, limit, budget, ring=self.broker.ring)
        while not scan.done:
            for task in await self._drive(self._answer(_search.step_plan(scan, self._plans._now()))):
                yield task

    async def events(self, queue: str, *, since: datetime | float | str | None = None,
                     follow: bool = False) -> AsyncIterator[TaskEvent]:
        """See :meth:`Inspector.events` (``async for event in inspector.events(...)``)."""
        reader = ev.Reader(queue, since, follow, block_ms=_block_ms(self.redis))
        while not reader.done:
            for event in reader.feed(await self._exec.run(reader.call())):
                yield event

    async def close(self) -> None:
        """Close the Redis client if this inspector made it."""
        if self._owns:
            await self.redis.aclose()

    async def __aenter__(self) -> AsyncInspector:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


def _block_ms(redis: Any) -> int:
    """How long a following read blocks: 5 s, or less than the client's socket timeout."""
    return int(max(0.05, min(5.0, read_timeout(redis) - 0.5)) * 1000)
