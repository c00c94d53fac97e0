"""What a server's loops share: the ``Context`` (Redis client, executor, broker, clock, the stop
signals) and ``Health`` (one log line per Redis outage).

Settings are not shared: each loop takes its own small frozen ``…Params`` (defined in its module,
built by the server from :class:`ServerOptions`), holding only what that loop reads, as asynq's
params structs do; the processor, which reads most settings, takes the ``ServerOptions``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.exceptions import AuthenticationError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.model.clock import Clock
from ..core.model.codec import Message
from ..core.model.task import Task
from ..core.processes.model import TYPE_PREFIX as PROCESS_PREFIX
from ..core.processes.model import process_of
from ..core.security.signing import Signer
from ..core.spine.broker import Broker
from ..redisio.connection import REDIS_ERRORS, RETRYABLE, is_cluster, read_timeout
from ..redisio.executor import AsyncExecutor
from .metrics import WorkerMetrics
from .queues import ServedQueues

log = logging.getLogger("asynqpy.server")

MAX_BACKOFF = 5.0
"""Longest wait between tries of a loop whose Redis calls fail."""
OUTAGE_GRACE = 1.0
"""Seconds of failing calls before an outage is announced, and without one before it is over."""


def is_outage(exc: BaseException) -> bool:
    """Does ``exc`` mean Redis (or a cluster slot's master) cannot be reached right now? (Refused
    credentials are not an outage: redis-py's AuthenticationError is a ConnectionError.)"""
    return isinstance(exc, RETRYABLE) and not isinstance(exc, AuthenticationError)


class Health:
    """Whether this server reaches Redis, shared by all its loops, so that an outage is logged
    once when it starts and once when it ends (with its length), however many loops keep trying
    meanwhile (they log their failures at DEBUG). A failure that is not an outage (an ACL refusal,
    a script error) is logged by every call at WARNING, as before.

    Redis shutting down or restarting makes calls flap (a connection still open succeeds between
    failures; a pooled connection opened before a restart fails once after it): an outage is
    announced once failures have gone on for :data:`OUTAGE_GRACE` (a lone failure is only logged
    at DEBUG), and ends when no call failed for as long."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.announced = False
        self.last_failure = 0.0
        self.failures = 0  # during the current outage
        self.total_failures = 0  # ever: a pass that saw none may end an outage

    def failed(self, what: str, exc: BaseException) -> None:
        """Record that ``what`` failed with ``exc``."""
        if not is_outage(exc):
            log.warning("%s failed: %s", what, exc)
            return
        now = time.monotonic()
        self.failures += 1
        self.total_failures += 1
        self.last_failure = now
        if self.down_since is None:
            self.down_since, self.announced = now, False
        if not self.announced and now - self.down_since >= OUTAGE_GRACE:
            self.announced = True
            log.warning("lost the connection to Redis (%s failed: %s); retrying with backoff (at most %gs "
                        "apart), running tasks keep going", what, exc, MAX_BACKOFF)
        else:
            log.debug("%s failed while Redis is unreachable: %s", what, exc)

    def ok(self) -> None:
        """Record a successful call: ends an outage (one line), once no call has failed for
        :data:`OUTAGE_GRACE`."""
        now = time.monotonic()
        if self.down_since is not None and now - self.last_failure >= OUTAGE_GRACE:
            if self.announced:
                log.warning("the connection to Redis is back after %.1fs (%d failed call(s) meanwhile)",
                            now - self.down_since, self.failures)
            self.down_since, self.announced, self.failures = None, False, 0

    @property
    def down(self) -> bool:
        return self.down_since is not None


class Context:
    """What the server's loops share: the Redis client and executor, the broker, the clock, the stop
    signals and the Redis health. No settings: see the module's docstring."""

    def __init__(self, redis: Any, clock: Clock, signer: Signer | None = None, ring: Any = None,
                 offload: Any = None) -> None:
        self.redis = redis
        self.exec = AsyncExecutor(redis)
        self.exec.keep_direct = True  # (its kept connection is given back when the server stops: server.py)
        self.broker = Broker(clock, signer, ring)
        self.clock = clock
        self.cluster = is_cluster(redis)
        # a blocking wait must end before the client's socket timeout would abort it
        self.block_limit = max(0.05, read_timeout(redis) - 0.5)
        self.stopping = asyncio.Event()
        self.hurry = asyncio.Event()  # a second stop signal: requeue running tasks now
        self.health = Health()
        self.metrics = WorkerMetrics()  # records nothing unless the server has metrics on
        self._blpop_waits: dict[str, asyncio.Future[Any]] = {}  # cluster: per-key BLPOPs in flight
        self.served: ServedQueues | None = None  # the server's queues, when patterns may change them
        self.outboxes: set[str] = set()  # queues whose outbox has parents' ends to deliver
        self.outbox_ready = asyncio.Event()
        self.offload: Any = offload  # the blob store of offloaded payloads (worker/blobs.py), or None

    def kick_outbox(self, queue: str) -> None:
        """A finishing script told children of a parent of ``queue`` (or the recoverer saw its
        outbox non-empty): the propagator delivers them now."""
        self.outboxes.add(queue)
        self.outbox_ready.set()

    async def blpop_any(self, keys: Sequence[str], timeout: float) -> tuple[str, bytes] | None:
        """BLPOP on several keys; on a cluster (keys in different slots) one BLPOP per key.

        On a cluster, a key whose node failed raises only after the other keys were looked at; the
        BLPOPs of the keys that did not answer are kept for the next call, not cancelled, and a
        second BLPOP that answered too is returned by the next call, not dropped: a popped wake-up
        token must never be lost (a BLPOP cancelled while its reply is in flight
        has already popped its token), else an idle worker or forwarder sleeps until its timeout
        although work is waiting. They are cancelled only when the caller itself is cancelled.
        """
        timeout = min(max(timeout, 0.01), self.block_limit)
        if not self.cluster or len(keys) == 1:
            try:
                reply = await self.redis.blpop(list(keys), timeout=timeout)
            except RedisTimeoutError:  # the client gave up first: the same as "no token"
                return None
            return (reply[0].decode(), reply[1]) if reply else None
        await self._blpop_each(keys, timeout)
        return self._popped(keys)

    async def _blpop_each(self, keys: Sequence[str], timeout: float) -> None:
        """A cluster: one BLPOP per key (those still in flight from the last call kept), until one
        answers or ``timeout``; all cancelled if the caller is."""
        waits = self._blpop_waits
        for k in keys:
            if k not in waits:
                w = asyncio.ensure_future(self.redis.blpop([k], timeout=timeout))
                w.add_done_callback(lambda f: f.cancelled() or f.exception())  # never "unretrieved"
                waits[k] = w
        try:
            await asyncio.wait([waits[k] for k in keys], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            for k in keys:
                w = waits.pop(k, None)
                if w is not None:
                    w.cancel()
            raise

    def _popped(self, keys: Sequence[str]) -> tuple[str, bytes] | None:
        """The first of the per-key BLPOPs that answered with a token (those that answered after
        it are left for the next call); the error of an unreachable key's master if none did."""
        waits = self._blpop_waits
        error: BaseException | None = None
        for k in keys:
            w = waits[k]
            if w.done():
                del waits[k]
                try:
                    reply = w.result()
                except RedisTimeoutError:
                    continue
                except REDIS_ERRORS as exc:  # that key's master is unreachable: try the others
                    error = exc
                    continue
                if reply:
                    return (reply[0].decode(), reply[1])
        if error is not None:
            raise error
        return None

    async def repeat(
        self,
        what: str,
        pass_once: Callable[[], Awaitable[float]],
        error_wait: float,
        pause: Callable[[float], Awaitable[bool]] | None = None,
        loop: str = "",
    ) -> None:
        """Run ``pass_once`` (which returns seconds until it is next needed) until the server
        stops. A Redis error goes to :class:`Health` and is retried after ``error_wait``, doubling
        while it keeps failing (at most :data:`MAX_BACKOFF`); any other error is logged and retried
        the same way (a bug must not stop a background loop for good). ``pause`` replaces
        :meth:`sleep`. ``loop``: the loop's name in the metrics (each pass is timed)."""
        pause = pause or self.sleep
        backoff = error_wait
        while not self.stopping.is_set():
            try:
                before = self.health.total_failures
                started = time.perf_counter()
                wait = await pass_once()
                self.metrics.loop(loop, time.perf_counter() - started)
                if self.health.total_failures == before:  # no call of the pass failed
                    self.health.ok()
                    backoff = error_wait
            except REDIS_ERRORS as exc:
                self.health.failed(what, exc)
                wait, backoff = backoff, min(backoff * 2, max(MAX_BACKOFF, error_wait))
            except Exception:
                log.exception("%s failed unexpectedly", what)
                wait, backoff = backoff, min(backoff * 2, max(MAX_BACKOFF, error_wait))
            if await pause(wait):
                return

    async def sleep(self, seconds: float) -> bool:
        """Sleep, waking early when the server stops. Returns True if stopping."""
        if seconds > 0:
            try:
                await asyncio.wait_for(self.stopping.wait(), seconds)
            except asyncio.TimeoutError:
                pass
        return self.stopping.is_set()


@dataclass(eq=False)
class Running:
    """A task this server holds a lease on: executing, or finished and awaiting its write."""

    queue: str
    id: str
    token: str
    msg: Message
    task: Task | None
    lease_until: float  # loop time until which the lease is known to be ours
    aio: asyncio.Task[None] | None = None
    lost: bool = False  # the lease was lost: the handler is cancelled, nothing is written
    requeued: bool = False  # shutdown put it back to pending: nothing else is written
    timed_out: bool = False  # its timeout or deadline cancelled it
    started_ms: int = 0
    deadline_ms: int = 0
    timeout_ms: int = 0  # the attempt's own limit (0 = none), for error messages
    started: float = 0.0  # loop time the handler started
    ended: tuple[bool, Any] | None = None  # (completed, result or error text), for waiting callers
    progress: tuple[bytes, Any] | None = None  # the latest progress not written yet (encoded, value)
    progress_at: float = 0.0  # loop time of the last progress write
    progress_armed: bool = False  # a write of the latest progress is scheduled
    progress_sent: bool = False  # a progress write was sent: the outcome must clear its entry
    progress_write: Any = None  # the asyncio task writing its latest progress (the outcome waits for it)
    run_of: str = ""  # a run of a targeted task (id '<task id>|<worker>'): the task's id
    page: tuple[str, list[Any]] | None = None  # a process input's process as its dequeue read it (runner.py)
    checkpointed: list[bytes] | None = None  # a durable run's events its checkpoints wrote: streamed at commit
    # with a key ring: the task's message once its encrypted values are opened for the handler (as
    # stored, the payload decrypted beside it in the Task; or a decrypted copy: processor._payload)
    opened: Message | None = None
    fetched: bool = False  # its payload was read from its blob: the message stored keeps the reference

    @property
    def fields(self) -> str:
        """The task as ``key=value`` fields, the same in every log line about it (a process
        input's line names its process and the input's kind too)."""
        pid, kind = process_of(self.msg) if self.msg.type.startswith(PROCESS_PREFIX) else ("", "")
        where = f" process={pid} input={kind}" if pid else ""
        return f"id={self.id} type={self.msg.type} queue={self.queue}{where} attempt={self.msg.retried + 1}"

    @property
    def extra(self) -> dict[str, Any]:
        """The same fields for structured logging (``logging`` ``extra``)."""
        out: dict[str, Any] = {"task_id": self.id, "task_type": self.msg.type, "queue": self.queue,
                               "attempt": self.msg.retried + 1}
        pid, kind = process_of(self.msg) if self.msg.type.startswith(PROCESS_PREFIX) else ("", "")
        if pid:
            out.update(process_id=pid, process_input=kind)
        return out


class Holder(Protocol):
    """What the heartbeat, the canceller and the watchdog need of the processor: the tasks this
    server holds a lease on, and a way to give one up (cancel its handler, write nothing)."""

    held: dict[tuple[str, str], Running]

    def lose(self, r: Running, why: str) -> None: ...
