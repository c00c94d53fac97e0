"""Client and AsyncClient: put tasks on queues (now, later, uniquely, in batches).

Every public method is written once, as a plan of :class:`~asynqpy.core.client.plans.ClientPlans`
(:mod:`asynqpy.core.spine.twin`); the two classes only run its steps, :class:`Client` synchronously and
:class:`AsyncClient` with ``await``: each has its connection, write path (an auto-pipeline shared by
concurrent callers) and inbox.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from .core.client.plans import BATCH, PROCESS_OPTIONS, BatchItem, TaskInfoList, Wait, Writes, _settle
from .core.durable.operating import DurableOpsPlans
from .core.model.clock import Clock
from .core.model.task import TaskInfo
from .core.results.plans import RECHECK
from .core.security.signing import SigningKeys
from .core.spine.broker import LONE_FULL, Call
from .core.spine.twin import Async, Sync
from .redisio.connection import async_client, sync_client
from .redisio.executor import AsyncExecutor, SyncExecutor
from .redisio.inbox import AsyncInbox, SyncInbox
from .redisio.protocol import GuardedAsyncExecutor, GuardedSyncExecutor
from .worker.blobs import check_store

__all__ = ["BATCH", "PROCESS_OPTIONS", "AsyncClient", "BatchItem", "Client", "TaskInfoList"]


class _AutoPipeline:
    """Sends the calls of concurrent callers together: a caller that finds nothing in flight sends
    its calls at once (a lone producer pays nothing); callers that come while a round trip is in
    flight queue up and go out together in the next pipeline. So 100 coroutines enqueueing at once
    share round trips and one connection, and 1 000 concurrent ``call()``s take a few round trips,
    not 1 000 connections. Each caller gets its own replies (exceptions in place); a coroutine's
    own calls stay in order (it awaits each)."""

    def __init__(self, executor: AsyncExecutor) -> None:
        self.exec = executor
        self.queued: list[tuple[list[Call[Any]], asyncio.Future[list[Any]]]] = []
        self.flusher: asyncio.Task[None] | None = None
        self.busy = False  # a round trip is in flight (a direct one, or the flusher's)

    async def run(self, calls: list[Call[Any]]) -> list[Any]:
        if not self.busy:
            self.busy = True
            try:
                if len(calls) == 1:
                    return [await _arun_or_exc(self.exec, calls[0])]
                return await self.exec.run_many(calls)
            finally:
                if self.queued and self.flusher is None:
                    self.flusher = asyncio.create_task(self._flush(), name="asynqpy-client-pipeline")
                else:
                    self.busy = self.flusher is not None
        fut: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.queued.append((calls, fut))
        return await fut

    async def _flush(self) -> None:
        try:
            while self.queued:
                batch, self.queued = self.queued, []
                try:
                    results = await self.exec.run_many([c for calls, _ in batch for c in calls])
                except Exception as exc:  # noqa: BLE001 - each caller gets it
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                i = 0
                for calls, fut in batch:
                    if not fut.done():
                        fut.set_result(results[i:i + len(calls)])
                    i += len(calls)
        finally:
            self.flusher = None
            self.busy = False


class _Waiter:
    """A thread's calls queued behind a round trip in flight (see :class:`_SyncAutoPipeline`)."""

    __slots__ = ("calls", "done", "lead", "results", "error")

    def __init__(self, calls: list[Call[Any]]) -> None:
        self.calls = calls
        self.done = threading.Lock()  # held until the results are in (cheaper than an Event)
        self.done.acquire()
        self.lead = False  # promoted: this thread sends the queued calls (its own among them)
        self.results: list[Any] = []
        self.error: BaseException | None = None


class _SyncAutoPipeline:
    """The threads' twin of :class:`_AutoPipeline`: a thread that finds no round trip in flight
    sends its calls at once; threads that come meanwhile queue up, and when the round trip ends
    the first of them is woken to send everything queued in one pipeline (then it hands over to
    the next queued thread, if any). So a thread never sends more than one round trip of others'
    calls, 8 threads enqueueing at once share round trips and one connection, and each gets its
    own replies (exceptions in place), its own calls in order."""

    def __init__(self, executor: SyncExecutor) -> None:
        self.exec = executor
        self.lock = threading.Lock()
        self.queued: list[_Waiter] = []
        self.busy = False

    def run(self, calls: list[Call[Any]]) -> list[Any]:
        with self.lock:
            leader = not self.busy
            if leader:
                self.busy = True
            else:
                me = _Waiter(calls)
                self.queued.append(me)
        if leader:
            try:
                if len(calls) == 1:
                    return [_run_or_exc(self.exec, calls[0])]
                return self.exec.run_many_now(calls)
            finally:
                self._hand_over()
        me.done.acquire()
        if me.lead:
            self._send_queued()
        if me.error is not None:
            raise me.error
        return me.results

    def _hand_over(self) -> None:
        """The round trip ended: wake the first queued thread to send the queue, or go idle."""
        with self.lock:
            if not self.queued:
                self.busy = False
                return
            first = self.queued[0]
            first.lead = True
        first.done.release()

    def _send_queued(self) -> None:
        with self.lock:
            batch, self.queued = self.queued, []
        try:
            try:
                results = self.exec.run_many_now([c for w in batch for c in w.calls])
            except BaseException as exc:  # noqa: BLE001 - each caller gets it
                for w in batch:
                    w.error = exc
            else:
                i = 0
                for w in batch:
                    w.results = results[i:i + len(w.calls)]
                    i += len(w.calls)
            for w in batch:
                if not w.lead:
                    w.done.release()
        finally:
            self._hand_over()


class _Facade(DurableOpsPlans):
    """What the two clients share: the connection, its executor, the write path, an inbox per
    queue. A step's reply is a value (Client) or an awaitable of it (AsyncClient)."""

    _connect: Callable[[Any], Any]
    _executor: Callable[[Any], Any]
    _autopipeline: Callable[[Any], Any]
    _new_inbox: Callable[..., Any]

    def __init__(self, redis: Any = None, *, max_payload_bytes: int = 1 << 20, clock: Clock | None = None,
                 signing_key: SigningKeys | None = None, wait_replicas: int = 0, wait_timeout: float = 1.0,
                 recheck: float = RECHECK, encryption: Any = None, offload: Any = None) -> None:
        super().__init__(max_payload_bytes, clock, signing_key, wait_replicas, wait_timeout, recheck, encryption,
                         check_store(offload))
        self.redis = self._connect(redis)
        self._owns = redis is None or isinstance(redis, str)
        self._exec = self._executor(self.redis)
        if self._owns and isinstance(self._exec, AsyncExecutor):  # its kept connection: released at close
            self._exec.keep_direct = True
        self._pipeline = self._autopipeline(self._exec)  # concurrent callers share round trips
        self._inboxes: dict[str, Any] = {}

    def _inbox(self, queue: str) -> Any:
        inbox = self._inboxes.get(queue)
        if inbox is None:
            inbox = self._inboxes.setdefault(queue, self._new_inbox(self.redis, self._exec, self.broker, queue,
                                                                    self.recheck))
        return inbox

    def _run(self, calls: list[Call[Any]]) -> Any:
        """The write path: each call's reply or exception, in order."""
        if self.wait_replicas:
            return self._exec.run_many_replicated(calls, self.wait_replicas, self._wait_ms)
        return self._pipeline.run(calls)

    def _step(self, step: Any) -> Any:
        if type(step) is Writes:
            return self._run(step)
        if isinstance(step, Call):
            return self._exec.run(step)
        if isinstance(step, Wait):
            return self._wait(step)
        return self._exec.run_many(step)

    def _wait(self, w: Wait) -> Any:
        raise NotImplementedError


class Client(_Facade, Sync):
    """Enqueues tasks (synchronous).

    ``redis``: a URL (default ``$ASYNQPY_REDIS_URL`` or redis://localhost:6379/0;
    ``redis+cluster://h:p,h:p`` for a Redis Cluster, ``redis+sentinel://h:p,h:p/master`` through
    Sentinel; see :mod:`asynqpy.connection`) or a redis-py client. ``max_payload_bytes``: the
    largest encoded payload accepted. ``signing_key``: bytes (or a list, the first signs) to sign
    every task with HMAC-SHA256 for workers that require it (see :mod:`asynqpy.signing`).
    ``encryption``: a :class:`~asynqpy.KeyRing`: payloads are encrypted with it, results read
    with it decrypted (docs/encryption.md).

    ``wait_replicas`` (default 0: off): every write (enqueue, enqueue_many, pause, unpause) is
    followed by ``WAIT wait_replicas wait_timeout`` on the same connection of the same node, and
    is acknowledged only once that many replicas have it; else it raises (or, in a batch with
    ``return_exceptions``, returns) :class:`NotReplicatedError`: the write is on the master then,
    but a failover may lose it. With ``wait_replicas`` equal to each master's number of replicas,
    an acknowledged write survives the failover of its master (docs/cluster.md).
    """

    _connect = staticmethod(sync_client)
    _executor, _autopipeline, _new_inbox = GuardedSyncExecutor, _SyncAutoPipeline, SyncInbox  # checks the protocol
    _exec: SyncExecutor

    def _wait(self, w: Wait) -> Any:
        inbox = self._inbox(w.queue)

        def start() -> None:
            got = self._drive(w.start)
            if got is not None:
                inbox.offer(w.id, got)

        return inbox.wait(w.id, w.timeout, late=w.late, start=start, on_progress=w.on_progress)

    def close(self) -> None:
        """Give the connection back to the pool; close the Redis client if this made it."""
        self._exec.close()
        if self._owns:
            self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Facade, Async):
    """The asyncio twin of :class:`Client`: same arguments, same methods, awaitable."""

    _connect = staticmethod(async_client)
    _executor, _autopipeline, _new_inbox = GuardedAsyncExecutor, _AutoPipeline, AsyncInbox
    _exec: AsyncExecutor

    async def _wait(self, w: Wait) -> Any:
        inbox = self._inbox(w.queue)
        fut = inbox.expect(w.id, late=w.late, on_progress=w.on_progress)
        try:
            got = await self._drive(w.start)
        except BaseException:
            inbox.forget(w.id, fut, started=False)
            raise
        inbox.started(w.id)  # stored, or watched: from now on a recheck may look at it (not before)
        if got is not None:
            inbox.forget(w.id, fut)
            return _settle(got)
        return await inbox.wait(w.id, fut, w.timeout)

    async def close(self) -> None:
        """Stop the inboxes (a call still waiting raises); close the Redis client if this made it."""
        for inbox in self._inboxes.values():
            await inbox.close()
        await self._exec.release_direct()
        if self._owns:
            await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _quick_enqueue(planned: Callable[..., Any]) -> Callable[..., Any]:
    """Client.enqueue: the common call (see :meth:`ClientPlans._lone`) sent at once, without
    driving the plan (its generators, its list of calls, its list of results: about a third of
    the client's CPU per call); any other call runs the plan (``planned``, the twin's method)."""
    def enqueue(self: Client, /, task_type: str, payload: Any = None, **options: Any) -> TaskInfo:
        lone = self._lone(task_type, payload, options)
        if lone is None:
            return planned(self, task_type, payload, **options)  # type: ignore[no-any-return]
        p, calls = lone
        registered, reply = self._pipeline.run(calls)
        if isinstance(registered, Exception):
            raise registered
        if isinstance(reply, Exception):
            raise reply
        if reply == LONE_FULL:  # a producer rule is set: nothing written, the plan's enqueue admits it
            self._lone_full(p.queue)
            return planned(self, task_type, payload, **options)  # type: ignore[no-any-return]
        return self._lone_info(p, reply)

    _same_face(enqueue, planned)
    return enqueue


def _aquick_enqueue(planned: Callable[..., Any]) -> Callable[..., Any]:
    """AsyncClient.enqueue: the twin of :func:`_quick_enqueue`."""
    async def enqueue(self: AsyncClient, /, task_type: str, payload: Any = None, **options: Any) -> TaskInfo:
        lone = self._lone(task_type, payload, options)
        if lone is None:
            return await planned(self, task_type, payload, **options)  # type: ignore[no-any-return]
        p, calls = lone
        registered, reply = await self._pipeline.run(calls)
        if isinstance(registered, Exception):
            raise registered
        if isinstance(reply, Exception):
            raise reply
        if reply == LONE_FULL:  # a producer rule is set: nothing written, the plan's enqueue admits it
            self._lone_full(p.queue)
            return await planned(self, task_type, payload, **options)  # type: ignore[no-any-return]
        return self._lone_info(p, reply)

    _same_face(enqueue, planned)
    return enqueue


def _same_face(f: Callable[..., Any], planned: Callable[..., Any]) -> None:
    """``f`` shows the twin's method's name, signature and docstring."""
    for attr in ("__name__", "__qualname__", "__module__", "__doc__", "__signature__", "__annotations__"):
        setattr(f, attr, getattr(planned, attr))


setattr(Client, "enqueue", _quick_enqueue(getattr(Client, "enqueue")))  # noqa: B009,B010 - replaces the twin's method
setattr(AsyncClient, "enqueue", _aquick_enqueue(getattr(AsyncClient, "enqueue")))  # noqa: B009,B010


def _run_or_exc(ex: SyncExecutor, call: Call[Any]) -> Any:
    try:
        return ex.run(call)
    except Exception as exc:  # noqa: BLE001 - re-raised by _results
        return exc


async def _arun_or_exc(ex: AsyncExecutor, call: Call[Any]) -> Any:
    try:
        return await ex.run(call)
    except Exception as exc:  # noqa: BLE001 - re-raised by _results
        return exc
