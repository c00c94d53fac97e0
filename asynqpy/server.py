"""Server: runs handlers for the tasks of a set of queues.

A server is one asyncio event loop with these cooperating loops (one module each):
processor (fetch, run, finish), heartbeat (leases, liveness), forwarder (scheduled/retry ->
pending), recoverer (expired leases), janitor (expired completed tasks). ``run()`` blocks until
SIGTERM/SIGINT, then shuts down gracefully; ``arun()`` is the same inside a running loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from redis.exceptions import AuthenticationError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .broker import Broker, Call
from .clock import Clock
from .connection import REDIS_ERRORS, RETRYABLE, async_client, check_url, is_cluster, read_timeout
from .errors import InvalidArgumentError
from .executor import AsyncExecutor
from .keys import validate_queue
from .mux import ServeMux
from .options import MAX_SECONDS, unknown_options
from .retry import RetryDelayFunc, default_retry_delay
from .signing import Signer, SigningKeys, make_signer
from .threadpool import DaemonThreadPool
from .watchdog import LoopWatchdog

log = logging.getLogger("asynqpy.server")


MAX_FETCH_BATCH = 1000
"""Most tasks one dequeue call may take (bulk script calls stay bounded)."""


def _integer(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"from {low} to {high}"
        raise InvalidArgumentError(f"{name} must be an int {bounds}, got {value!r}")


def _seconds(name: str, value: Any, *, zero_ok: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        0 <= value <= MAX_SECONDS and (zero_ok or value > 0)
    ):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds {'>= 0' if zero_ok else '> 0'} (at most 100 years), got {value!r}"
        )


@dataclass(frozen=True)
class ServerOptions:
    """Every server setting, with its default. Durations are seconds."""

    queues: Mapping[str, int] = field(default_factory=lambda: {"default": 1})
    concurrency: int = 10
    strict_priority: bool = False
    lease: float = 30.0
    heartbeat_interval: float = 5.0
    shutdown_timeout: float = 8.0
    default_timeout: float | None = 1800.0
    retry_delay: RetryDelayFunc = default_retry_delay
    archive_max_size: int = 10_000
    archive_max_age: float = 90 * 24 * 3600.0
    unknown_type: Literal["retry", "archive"] = "retry"
    idle_timeout: float = 10.0
    recover_interval: float = 10.0
    janitor_interval: float = 30.0
    reconcile_interval: float = 300.0
    fetch_batch: int = 32
    sync_threads: int | None = None
    fail_fast: bool = False
    block_warning: float | None = 0.5
    fair_dispatch: bool = False

    def validate(self) -> ServerOptions:
        """Return self if every setting has a valid type and value, else raise InvalidArgumentError."""
        if not isinstance(self.queues, Mapping) or not self.queues:
            raise InvalidArgumentError("a server needs at least one queue (a mapping name -> weight)")
        for name, weight in self.queues.items():
            validate_queue(name)
            _integer(f"queue {name!r} weight", weight, 1)
        _integer("concurrency", self.concurrency, 1)
        _integer("fetch_batch", self.fetch_batch, 1, MAX_FETCH_BATCH)
        _integer("archive_max_size", self.archive_max_size, 0)
        if self.sync_threads is not None:
            _integer("sync_threads", self.sync_threads, 1)
        for name in ("lease", "heartbeat_interval", "idle_timeout", "recover_interval", "janitor_interval",
                     "archive_max_age"):
            _seconds(name, getattr(self, name))
        _seconds("shutdown_timeout", self.shutdown_timeout, zero_ok=True)
        _seconds("reconcile_interval", self.reconcile_interval, zero_ok=True)  # 0 = no consistency sweep
        if self.default_timeout is not None:
            _seconds("default_timeout", self.default_timeout)
        if self.heartbeat_interval >= self.lease:
            raise InvalidArgumentError("need 0 < heartbeat_interval < lease")
        if not isinstance(self.strict_priority, bool):
            raise InvalidArgumentError(f"strict_priority must be a bool, got {self.strict_priority!r}")
        for name in ("fail_fast", "fair_dispatch"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.block_warning is not None:
            _seconds("block_warning", self.block_warning)
        if self.unknown_type not in ("retry", "archive"):
            raise InvalidArgumentError("unknown_type must be 'retry' or 'archive'")
        if not callable(self.retry_delay):
            raise InvalidArgumentError("retry_delay must be a function (retried, error, task) -> seconds")
        return self

    @property
    def lease_ms(self) -> int:
        return int(self.lease * 1000)

    @property
    def recover_every(self) -> float:
        """The recoverer's longest sleep: short enough to see every lease before it expires."""
        return min(self.recover_interval, self.lease / 3)


MAX_BACKOFF = 5.0
"""Longest wait between tries of a loop whose Redis calls fail."""
STOP_LOOPS_TIMEOUT = 3.0
"""Seconds the background loops may take to stop once cancelled."""
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
    """What the server's loops share: the Redis clients, the broker, settings, the stop signal."""

    def __init__(self, redis: Any, options: ServerOptions, clock: Clock, server_id: str,
                 signer: Signer | None = None) -> None:
        self.redis = redis
        self.exec = AsyncExecutor(redis)
        self.broker = Broker(clock, signer)
        self.clock = clock
        self.options = options
        self.server_id = server_id
        self.queues = list(options.queues)
        self.cluster = is_cluster(redis)
        # a blocking wait must end before the client's socket timeout would abort it
        self.block_limit = max(0.05, read_timeout(redis) - 0.5)
        self.stopping = asyncio.Event()
        self.hurry = asyncio.Event()  # a second stop signal: requeue running tasks now
        self.health = Health()
        self._blpop_waits: dict[str, asyncio.Future[Any]] = {}  # cluster: per-key BLPOPs in flight

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
    ) -> None:
        """Run ``pass_once`` (which returns seconds until it is next needed) until the server
        stops. A Redis error goes to :class:`Health` and is retried after ``error_wait``, doubling
        while it keeps failing (at most :data:`MAX_BACKOFF`); any other error is logged and retried
        the same way (a bug must not stop a background loop for good). ``pause`` replaces
        :meth:`sleep`."""
        pause = pause or self.sleep
        backoff = error_wait
        while not self.stopping.is_set():
            try:
                before = self.health.total_failures
                wait = await pass_once()
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


class Server:
    """Processes tasks from ``queues`` with the handlers of a :class:`ServeMux`.

    ``redis``: URL or redis-py asyncio client (default ``$ASYNQPY_REDIS_URL``). ``queues``: a
    mapping name -> weight (or a list of names, weight 1). ``signing_key``: bytes (or a list for
    key rotation: the first signs, all verify); the server then runs only tasks signed with one of
    them, archives the others unrun ("bad signature"), and signs every message it rewrites. Other
    keyword options: see :class:`ServerOptions` (and the README for what each does).
    """

    def __init__(
        self,
        redis: Any = None,
        *,
        queues: Mapping[str, int] | Sequence[str] | None = None,
        clock: Clock | None = None,
        signing_key: SigningKeys | None = None,
        **options: Any,
    ) -> None:
        if isinstance(queues, Mapping):
            options["queues"] = dict(queues)
        elif isinstance(queues, (list, tuple)):
            options["queues"] = {validate_queue(q): 1 for q in queues}
        elif queues is not None:
            raise InvalidArgumentError(f"queues must be a mapping name -> weight or a list of names, got {queues!r}")
        unknown = options.keys() - {f.name for f in fields(ServerOptions)}
        if unknown:
            names = [f.name for f in fields(ServerOptions)]
            raise InvalidArgumentError(unknown_options("server option", unknown, names))
        self.options = ServerOptions(**options).validate()
        self._signer = make_signer(signing_key)
        if isinstance(redis, str):
            check_url(redis)  # a bad TLS option fails here, not when the server starts
        self._redis_arg = redis
        self.clock = clock or Clock()
        self.server_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.started_at = time.time()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, mux: ServeMux) -> None:
        """Run until SIGTERM or SIGINT, then shut down gracefully."""
        asyncio.run(self.arun(mux, install_signal_handlers=True))

    def _on_signal(self, ctx: Context, sig: signal.Signals) -> None:
        """SIGINT/SIGTERM: the first one starts the graceful shutdown, a second one requeues the
        running tasks at once."""
        name = signal.Signals(sig).name
        if not ctx.stopping.is_set():
            ctx.stopping.set()
            log.warning("%s: shutting down; waiting up to %gs for running tasks to finish (press Ctrl-C "
                        "again to stop now: they are put back to their queues at once)", name,
                        self.options.shutdown_timeout)
        elif not ctx.hurry.is_set():
            ctx.hurry.set()
            log.warning("%s again: stopping now; putting running tasks back to their queues", name)

    def stop(self) -> None:
        """Ask a running server to shut down gracefully (thread-safe)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def arun(self, mux: ServeMux, *, install_signal_handlers: bool = False) -> None:
        """Run inside the current event loop until :meth:`stop` (or a signal, if installed)."""
        from .canceller import Canceller
        from .forwarder import Forwarder
        from .heartbeat import Heartbeat
        from .janitor import Janitor
        from .processor import Processor
        from .recoverer import Recoverer

        redis = async_client(self._redis_arg, socket_timeout=self.options.idle_timeout + 5)
        ctx = Context(redis, self.options, self.clock, self.server_id, self._signer)
        self._loop = asyncio.get_running_loop()
        self._stop = ctx.stopping
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._on_signal, ctx, sig)
        pool = DaemonThreadPool(2 * (self.options.sync_threads or self.options.concurrency))
        processor = Processor(ctx, mux, pool)
        heartbeat = Heartbeat(ctx, processor, self.started_at)
        loops: list[Forwarder | Recoverer | Janitor | Canceller] = [
            Forwarder(ctx), Recoverer(ctx), Janitor(ctx), Canceller(ctx, processor)]
        bg: list[asyncio.Task[None]] = []
        hb_task: asyncio.Task[None] | None = None
        started = False
        watchdog = LoopWatchdog(self._loop, processor.held, self.options.block_warning)
        try:
            if not await _wait_for_redis(ctx):
                return  # stopped while waiting
            started = True
            log.info("server %s started: queues=%s concurrency=%d", self.server_id,
                     dict(self.options.queues), self.options.concurrency)
            try:
                await heartbeat.beat()
            except REDIS_ERRORS as exc:  # lost again already: the heartbeat loop keeps trying
                ctx.health.failed("the first heartbeat", exc)
            watchdog.start()
            bg = [asyncio.create_task(lp.run(), name=f"asynqpy-{type(lp).__name__.lower()}") for lp in loops]
            hb_task = asyncio.create_task(heartbeat.run(), name="asynqpy-heartbeat")
            await processor.run()  # returns after the graceful shutdown of the handlers
        finally:
            watchdog.stop()
            for t in bg:  # the heartbeat goes last: it keeps leases alive until every write is done
                t.cancel()
            if bg:  # bounded: a loop stuck in a client library's teardown must not keep the server up
                _, stuck = await asyncio.wait(bg, timeout=STOP_LOOPS_TIMEOUT)
                for t in stuck:
                    log.error("%s did not stop within %gs of being cancelled; leaving it", t.get_name(),
                              STOP_LOOPS_TIMEOUT)
            if hb_task is not None:
                hb_task.cancel()
                await asyncio.gather(hb_task, return_exceptions=True)
                await heartbeat.clear()
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    self._loop.remove_signal_handler(sig)
            pool.shutdown(wait=False)
            if self._redis_arg is None or isinstance(self._redis_arg, str):
                await redis.aclose()
            if started:
                log.info("server %s stopped", self.server_id)


async def _wait_for_redis(ctx: Context) -> bool:
    """Wait until Redis answers (a worker started before Redis, as in docker-compose, must not
    die): one line when it does not, one when it does, retries with backoff. With ``fail_fast``
    the first failure is raised instead. False if the server was stopped while waiting."""
    backoff = 0.1
    while True:
        try:
            await _check_redis(ctx)
            ctx.health.ok()
            return True
        except REDIS_ERRORS as exc:
            if ctx.options.fail_fast or not is_outage(exc):
                raise
            if ctx.health.down_since is None:
                log.warning("cannot reach Redis (%s); waiting for it, retrying with backoff (at most %gs apart; "
                            "fail_fast / --fail-fast to exit instead)", exc, MAX_BACKOFF)
                ctx.health.down_since, ctx.health.announced = time.monotonic(), True
            ctx.health.failed("connecting", exc)
        if await ctx.sleep(backoff):
            return False
        backoff = min(backoff * 2, MAX_BACKOFF)


async def _check_redis(ctx: Context) -> None:
    """Check Redis answers and warn about a Redis that may evict task data. The served queues are
    not registered here (a typo in ``--queues`` would stay listed for good): a queue is registered
    when a task is first enqueued to it. A full Redis (maxmemory) does not stop a worker from
    starting: draining queues is how memory comes back."""
    await ctx.exec.run(Call(lambda r: r, command=("TIME",)))  # a command every role may run
    try:
        policy = await ctx.redis.config_get("maxmemory-policy")
    except REDIS_ERRORS:  # CONFIG is often forbidden (managed Redis, ACL): nothing to say
        return
    value = policy.get("maxmemory-policy") if isinstance(policy, dict) else None
    if isinstance(value, bytes):
        value = value.decode()
    if value and value != "noeviction":
        log.warning("Redis maxmemory-policy is %r: when Redis is full it may evict keys that hold tasks; "
                    "set it to 'noeviction' (enqueue then fails with RedisFullError instead)", value)
