"""Server: runs handlers for the tasks of a set of queues.

A server is one asyncio event loop with these cooperating loops (one module each):
processor (fetch, run, finish), heartbeat (leases, liveness), forwarder (scheduled/retry ->
pending), recoverer (expired leases), janitor (expired completed tasks), and those the options
call for; :data:`SERVER_LOOPS` is their registry (when each runs, how it starts and stops, in
what order). ``run()`` blocks until SIGTERM/SIGINT, then shuts down gracefully; ``arun()`` is the
same inside a running loop.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, Protocol

from .core.handlers.mux import ServeMux
from .core.model.clock import Clock
from .core.model.errors import AsynqpyError, InvalidArgumentError
from .core.model.options import unknown_options
from .core.security.encryption import KeyRing, check_ring
from .core.security.signing import SigningKeys, make_signer
from .core.spine.broker import Call
from .core.spine.keys import ALL_QUEUES, is_queue_pattern, similar_queue, validate_queue_or_pattern
from .redisio.connection import REDIS_ERRORS, async_client, check_url
from .redisio.protocol import acheck
from .worker.context import MAX_BACKOFF, Context, is_outage
from .worker.discovery import Discovery
from .worker.forwarder import Forwarder, ForwarderParams
from .worker.heartbeat import Heartbeat, HeartbeatParams
from .worker.janitor import Janitor, JanitorParams
from .worker.logs import capture_start, capture_stop
from .worker.metrics import MULTIPROC_ENV, prometheus_metrics
from .worker.offload import BlobJanitor, check_store
from .worker.processor import Processor
from .worker.queues import ServedQueues
from .worker.recoverer import Recoverer, RecovererParams
from .worker.settings import ServerOptions
from .worker.supervisor import HURRY_SIGNAL
from .worker.threadpool import DaemonThreadPool
from .worker.watchdog import LoopWatchdog
from .worker.workflows import Propagator

__all__ = ["Server", "ServerOptions"]

log = logging.getLogger("asynqpy.server")

STOP_LOOPS_TIMEOUT = 3.0
"""Seconds the background loops may take to stop once cancelled."""


LOOPS = ("asyncio", "uvloop")
"""The event loops :meth:`Server.run` (and ``asynqpy worker --loop``) can run on."""


def new_event_loop(name: str) -> asyncio.AbstractEventLoop:
    """A new event loop of kind ``name`` (:data:`LOOPS`); uvloop needs the ``uvloop`` extra."""
    if name == "asyncio":
        return asyncio.new_event_loop()
    if name == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise InvalidArgumentError("loop='uvloop' needs uvloop: "
                                       "pip install '.[uvloop]' in asynqpy's repository") from None
        return uvloop.new_event_loop()
    raise InvalidArgumentError(f"loop must be one of {', '.join(LOOPS)}, got {name!r}")


class Server:
    """Processes tasks from ``queues`` with the handlers of a :class:`ServeMux`.

    ``redis``: URL or redis-py asyncio client (default ``$ASYNQPY_REDIS_URL``). ``queues``: a
    mapping name -> weight (or a list of names, weight 1). ``signing_key``: bytes (or a list for
    key rotation: the first signs, all verify); the server then runs only tasks signed with one of
    them, archives the others unrun ("bad signature"), and signs every message it rewrites.
    ``encryption``: a :class:`~asynqpy.KeyRing` (docs/encryption.md) that opens encrypted tasks and
    seals their results and logs; an encrypted task it cannot open is archived with why. ``offload``:
    its blob store (docs/offload.md). Others: :class:`ServerOptions` (what each does: docs/server.md).
    """

    def __init__(
        self,
        redis: Any = None,
        *,
        queues: Mapping[str, int] | Sequence[str] | None = None,
        clock: Clock | None = None,
        signing_key: SigningKeys | None = None,
        encryption: KeyRing | None = None,
        offload: Any = None,
        **options: Any,
    ) -> None:
        if isinstance(queues, Mapping):
            options["queues"] = dict(queues)
        elif isinstance(queues, (list, tuple)):
            options["queues"] = {validate_queue_or_pattern(q): 1 for q in queues}
        elif queues is not None:
            raise InvalidArgumentError(f"queues must be a mapping name -> weight or a list of names, got {queues!r}")
        names = [f.name for f in fields(ServerOptions)]
        if unknown := options.keys() - set(names):
            raise InvalidArgumentError(unknown_options("server option", unknown, names))
        self.options = ServerOptions(**options).validate()
        self._signer, self._ring, self._offload = make_signer(signing_key), check_ring(encryption), check_store(offload)
        if isinstance(redis, str):
            check_url(redis)  # a bad TLS option fails here, not when the server starts
        self._redis_arg = redis
        self.clock = clock or Clock()
        self.server_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.started_at = time.time()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._discovery: Discovery | None = None  # (a pattern server's: its failures make /readyz say not ready)

    def run(self, mux: ServeMux, *, loop: str = "asyncio", supervised: bool = False) -> None:
        """Run until SIGTERM or SIGINT, then shut down gracefully. ``loop``: the event loop,
        ``"asyncio"`` (the standard library's) or ``"uvloop"`` (``pip install '.[uvloop]' in asynqpy's repository``).
        Not ``asyncio.run``: that waits without limit for every task left to end, and a handler that
        ignores its cancellation (its task already put back to its queue) would keep the process alive.

        ``supervised``: this process is one of a supervisor's (``asynqpy worker --processes N``,
        worker/supervisor.py). SIGTERM and SIGINT then only start the graceful shutdown, however
        many arrive: one signal to the process group (Ctrl-C, systemd, dumb-init) reaches this
        process directly *and* through the supervisor, which forwards it. "Stop now" comes from
        the supervisor alone (:data:`~asynqpy.worker.supervisor.HURRY_SIGNAL`, sent when it is
        signalled a second time).

        From a thread other than the main one (Python delivers signals to the main thread only, and
        asyncio refuses to install handlers elsewhere: "set_wakeup_fd only works in main thread"), it
        runs without signal handlers, and says so in a log line: stop it with :meth:`stop`."""
        main = threading.current_thread() is threading.main_thread()
        if not main:
            log.info("Server.run in thread %r, not the main thread: no SIGTERM/SIGINT handlers (signals reach "
                     "the main thread only); stop it with Server.stop()", threading.current_thread().name)
        event_loop = new_event_loop(loop)
        try:
            event_loop.run_until_complete(self.arun(mux, install_signal_handlers=main, supervised=supervised))
        finally:
            _close_loop(event_loop)

    def _on_signal(self, ctx: Context, sig: signal.Signals, supervised: bool = False) -> None:
        """SIGINT/SIGTERM: the first one starts the graceful shutdown, a second one requeues the
        running tasks at once. Supervised: SIGINT/SIGTERM only start the graceful shutdown, and
        the supervisor's HURRY_SIGNAL requeues at once."""
        name = signal.Signals(sig).name
        hurry = sig == HURRY_SIGNAL if supervised else ctx.stopping.is_set()
        if hurry:
            ctx.stopping.set()
            if not ctx.hurry.is_set():
                ctx.hurry.set()
                log.warning("%s: stopping now; putting running tasks back to their queues",
                            "the supervisor was signalled again" if supervised else f"{name} again")
        elif not ctx.stopping.is_set():
            ctx.stopping.set()
            log.warning("%s: shutting down; waiting up to %gs for running tasks to finish (%s again to "
                        "stop now: they are put back to their queues at once)", name,
                        self.options.shutdown_timeout, "signal the supervisor" if supervised else "press Ctrl-C")
        else:  # supervised: the same signal through the group and through the supervisor
            log.debug("%s: already shutting down (a second signal to the supervisor stops now)", name)

    def stop(self) -> None:
        """Ask a running server to shut down gracefully (thread-safe; nothing happens if it has
        stopped already)."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop closed meanwhile: the server has stopped
                pass

    async def arun(self, mux: ServeMux, *, install_signal_handlers: bool = False, supervised: bool = False) -> None:
        """Run inside the current event loop until :meth:`stop` (or a signal, if installed; ``supervised``:
        see :meth:`run`). The loops of :data:`SERVER_LOOPS` start and stop around the processor, in order."""
        redis = async_client(self._redis_arg, socket_timeout=self.options.idle_timeout + 5)
        ctx = Context(redis, self.clock, self._signer, self._ring, self._offload)
        served = ctx.served = ServedQueues(self.options.queues)
        # the loops start with the queues named; those patterns match join through ctx.served
        o = replace(self.options, queues=dict(served.current))
        _serve_metrics(ctx, o)
        self._loop = asyncio.get_running_loop()
        self._stop = ctx.stopping
        signals = self._signals(supervised)
        if install_signal_handlers:
            self._add_signal_handlers(ctx, signals, supervised)
        pool = DaemonThreadPool(2 * (self.options.sync_threads or self.options.concurrency))
        processor = Processor(ctx, o, mux, pool)
        heartbeat = Heartbeat(ctx, processor, HeartbeatParams.of(o, self.server_id, self.started_at))
        probes, reach = self._start_probes(ctx, o, processor, heartbeat)
        # a worker's first fetch goes out right after the first heartbeat: the loops below start
        # LOOPS_DELAY after it (their first commands and connections would queue before it), the
        # canceller's modules (the controller, the inspector's plans) are imported then, and the
        # aggregator's and the scheduler's only when configured
        recoverer = Recoverer(ctx, RecovererParams.of(o))
        processor.dequeued = recoverer.touch  # a queue this server takes tasks of: its leases looked at
        parts = LoopParts(ctx, o, self.server_id, processor, heartbeat, pool, served, recoverer,
                          Forwarder(ctx, ForwarderParams.of(o)), reach)
        loops = _make_loops(parts, self.options)
        self._discovery = next((loop for spec, loop in loops if isinstance(loop, Discovery)), None)
        running: list[_Running] = []
        started = hooked = False
        watchdog = LoopWatchdog(self._loop, processor.held, self.options.block_warning)
        if o.capture_logs:  # the handlers' logging records go to their tasks' logs (worker/logs.py)
            capture_start()
        try:
            running += _start_loops(ctx, loops, "at_once")
            if not await _wait_for_redis(ctx, o.fail_fast):
                return  # stopped while waiting
            running += _start_loops(ctx, loops, "connected")
            await _prepare_loops(ctx, loops)  # (the discovery: the queues its patterns match, before the first fetch)
            await _run_hooks("on_startup", o.on_startup, pool)  # before any task is taken; raises if one fails
            hooked = True
            started = True
            log.info("server %s started: queues=%s concurrency=%d", self.server_id,
                     dict(self.options.queues), self.options.concurrency)
            try:  # the server is listed (and describes itself) before it takes a task
                await heartbeat.beat()
            except REDIS_ERRORS as exc:  # lost again already: the heartbeat loop keeps trying
                ctx.health.failed("the first heartbeat", exc)
            watchdog.start()
            running += _start_loops(ctx, loops, "serving")
            await processor.run()  # returns after the graceful shutdown of the handlers
        finally:
            if o.capture_logs:
                capture_stop()
            watchdog.stop()
            if probes is not None:
                probes.stop()
            await _stop_loops(running)
            if install_signal_handlers:
                self._remove_signal_handlers(signals, supervised)
            if hooked:
                await _shutdown_hooks(o.on_shutdown, pool)
            pool.shutdown(wait=False)
            ctx.metrics.close()
            await ctx.exec.release_direct()  # (the connection its direct path kept: context.py)
            if self._redis_arg is None or isinstance(self._redis_arg, str):
                await redis.aclose()
            if started:
                log.info("server %s stopped", self.server_id)

    @staticmethod
    def _signals(supervised: bool) -> tuple[signal.Signals, ...]:
        """The signals the server handles (when it installs handlers)."""
        return (signal.SIGTERM, signal.SIGINT, *((HURRY_SIGNAL,) if supervised else ()))

    def _add_signal_handlers(self, ctx: Context, signals: tuple[signal.Signals, ...], supervised: bool) -> None:
        assert self._loop is not None
        for sig in signals:
            self._loop.add_signal_handler(sig, self._on_signal, ctx, sig, supervised)

    def _remove_signal_handlers(self, signals: tuple[signal.Signals, ...], supervised: bool) -> None:
        assert self._loop is not None
        for sig in signals:
            self._loop.remove_signal_handler(sig)
        if supervised:  # a late "stop now" from the supervisor must not kill the exiting process
            signal.signal(HURRY_SIGNAL, signal.SIG_IGN)

    def _start_probes(self, ctx: Context, o: ServerOptions, processor: Processor,
                      heartbeat: Heartbeat) -> tuple[Any, Any]:
        """The health probes' server, started, and their Redis reach (None, None: no ``health_port``)."""
        if o.health_port is None:
            return None, None
        from .worker.probes import Probes, RedisReach

        reach = RedisReach(ctx.redis)  # (the connection's real state: not the outage log's bookkeeping)

        def probe_state() -> dict[str, Any]:
            finding = self._discovery.error if self._discovery is not None else None  # (not ready: issue 42)
            status = ("stopping" if ctx.stopping.is_set() else "quiet" if processor.quiet
                      else "discovering" if finding else "running" if heartbeat.registered else "starting")
            state = {"redis": reach.reached, "registered": heartbeat.registered, "status": status}
            return {**state, "discovery_error": finding} if finding else state

        probes = Probes(o.health_host, o.health_port, o.health_max_lag, probe_state)
        try:
            probes.start(asyncio.get_running_loop())
        except OSError as exc:
            raise InvalidArgumentError(f"health_port: cannot serve the probes on {o.health_host}:{o.health_port}: "
                                       f"{exc.strerror or exc}") from None
        return probes, reach


def _serve_metrics(ctx: Context, o: ServerOptions) -> None:
    """The worker's metrics: with ``metrics_port``, or in a process of ``--processes N`` (whose
    supervisor serves the sum); served here unless shared between processes."""
    if o.metrics_port is not None or os.environ.get(MULTIPROC_ENV):
        ctx.metrics = prometheus_metrics()
        if not ctx.metrics.multiprocess and o.metrics_port is not None:
            ctx.metrics.serve(o.metrics_port, o.metrics_host)
            log.info("serving metrics on http://%s:%d/metrics", o.metrics_host, o.metrics_port)


async def _shutdown_hooks(hooks: Sequence[Callable[[], Any]], pool: Any) -> None:
    """The on_shutdown hooks; one that raises is logged (the server stops regardless)."""
    try:
        await _run_hooks("on_shutdown", hooks, pool)
    except AsynqpyError as exc:
        log.error("%s", exc)


def _where(task: asyncio.Task[Any]) -> str:
    """Where ``task`` waits (its coroutine's stack): for the log of a loop that would not stop."""
    out = io.StringIO()
    task.print_stack(file=out)
    return out.getvalue()


async def _run_hooks(kind: str, hooks: Sequence[Callable[[], Any]], pool: Any) -> None:
    """Run lifecycle hooks in order (a plain function in the thread pool, an async one awaited);
    the first that raises stops the rest and is raised as an AsynqpyError naming it."""
    loop = asyncio.get_running_loop()
    for hook in hooks:
        try:
            result = await loop.run_in_executor(pool, hook)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            name = getattr(hook, "__qualname__", repr(hook))
            log.debug("%s hook %s failed", kind, name, exc_info=exc)
            raise AsynqpyError(f"{kind} hook {name} failed: {type(exc).__name__}: {exc}") from exc


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks left in ``loop``, wait for them at most STOP_LOOPS_TIMEOUT, close it."""
    left = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in left:
        t.cancel()
    if left:
        _, stuck = loop.run_until_complete(asyncio.wait(left, timeout=STOP_LOOPS_TIMEOUT))
        for t in stuck:
            log.error("%s did not stop within %gs of being cancelled (a handler ignoring cancellation?); "
                      "exiting without it", t.get_name(), STOP_LOOPS_TIMEOUT)
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


LOOPS_DELAY = 0.05
"""Seconds after the processor starts (its first fetch sent) that the background loops do. Each
is a timer loop (its first pass 50 ms later changes nothing); the canceller's imports no longer
hold up the first fetch. A cancel of a task that started meanwhile still ends its
lease (the handler's late write is refused); control commands sent meanwhile wait in their list
(Controller.drain)."""


async def _later(ctx: Context, run: Callable[[], Awaitable[None]]) -> None:
    """``run()`` LOOPS_DELAY from now (not at all if the server stops meanwhile)."""
    if not await ctx.sleep(LOOPS_DELAY):
        await run()


class _ControlLoop:
    """The canceller and the controller, imported when started."""

    def __init__(self, ctx: Context, processor: Processor, server_id: str, heartbeat: Heartbeat) -> None:
        self.ctx, self.processor, self.server_id, self.heartbeat = ctx, processor, server_id, heartbeat

    async def run(self) -> None:
        from .worker.canceller import Canceller
        from .worker.control import Controller

        control = Controller(self.ctx, self.server_id, self.processor, self.heartbeat.describe_call)
        await Canceller(self.ctx, self.processor, control).run()


# -- the loop registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopParts:
    """What the loops of :data:`SERVER_LOOPS` are made from: the server's context and options
    (``queues``: those named), its processor, heartbeat, thread pool, recoverer and forwarder (the
    processor and the discovery call on them), the served queues, and the probes' Redis reach
    (None: no probes)."""

    ctx: Context
    options: ServerOptions
    server_id: str
    processor: Processor
    heartbeat: Heartbeat
    pool: DaemonThreadPool
    served: ServedQueues
    recoverer: Recoverer
    forwarder: Forwarder
    reach: Any = None


class Loop(Protocol):
    """A loop: ``run()`` until cancelled (or until the server stops)."""

    def run(self) -> Awaitable[None]: ...


Phase = Literal["at_once", "connected", "serving"]


@dataclass(frozen=True)
class LoopSpec:
    """One loop of a server, a row of :data:`SERVER_LOOPS`. ``name``: its asyncio task is
    ``asynqpy-<name>``. ``when``: whether a server with these options runs it. ``make``: the loop,
    from the server's parts (made before the server connects). ``start``: when its task starts:
    ``at_once`` (before Redis answers), ``connected`` (once it does, before the startup hooks)
    or ``serving`` (after the first heartbeat, as the processor starts); ``delayed``: LOOPS_DELAY
    later (the processor's first fetch goes first). ``prepare``: awaited once Redis answers,
    before the startup hooks. ``stop``: None: cancelled with the others, all waited for at most
    STOP_LOOPS_TIMEOUT together; else awaited after them, on its own."""

    name: str
    when: Callable[[ServerOptions], bool]
    make: Callable[[LoopParts], Loop]
    start: Phase = "serving"
    delayed: bool = True
    prepare: Callable[[Context, Any], Awaitable[None]] | None = None
    stop: Callable[[Any, asyncio.Task[None]], Awaitable[None]] | None = None


class _QueueCheck:
    """Warns once about a served queue whose name looks like a typo (:func:`_check_queues`)."""

    def __init__(self, ctx: Context, queues: list[str]) -> None:
        self.ctx, self.queues = ctx, queues

    async def run(self) -> None:
        await _check_queues(self.ctx, self.queues)


async def _first_scan(ctx: Context, discovery: Discovery) -> None:
    """The queues the server's patterns match, before the first fetch."""
    try:
        await discovery.scan()
    except REDIS_ERRORS as exc:  # the discovery loop tries again
        discovery.error = f"{type(exc).__name__}: {exc}"  # (/readyz: not ready while it fails)
        ctx.health.failed("reading the queues the server's patterns match", exc)


async def _stop_heartbeat(heartbeat: Heartbeat, task: asyncio.Task[None]) -> None:
    """Stop the heartbeat (last: it keeps leases alive until every write is done) and unregister
    the server. Bounded like the loops: a heartbeat stuck in the client library's reconnection
    (seen once, just after a Redis restart) must not keep the server up; and should the library
    lose the cancellation, the loop ends at its next turn."""
    heartbeat.stop()
    task.cancel()
    _, stuck = await asyncio.wait([task], timeout=STOP_LOOPS_TIMEOUT)
    if stuck:
        log.error("the heartbeat did not stop within %gs of being cancelled; leaving it, at:\n%s",
                  STOP_LOOPS_TIMEOUT, _where(task))
    try:
        await asyncio.wait_for(heartbeat.clear(), STOP_LOOPS_TIMEOUT)
    except asyncio.TimeoutError:
        log.warning("could not unregister server within %gs", STOP_LOOPS_TIMEOUT)


def _aggregation(p: LoopParts) -> Loop:
    from .worker.aggregator import Aggregation, AggregatorParams

    o = p.options
    assert o.group_aggregator is not None  # (its row's when)
    return Aggregation(p.ctx, AggregatorParams(tuple(o.queues), o.group_aggregator, o.group_grace_period,
                                               o.group_max_delay, o.group_max_size), p.pool)


def _scheduling(p: LoopParts) -> Loop:
    from .worker.cron import SchedulerParams, Scheduling, entries_of

    o, ctx = p.options, p.ctx
    params = SchedulerParams(entries_of(o.scheduler_entries), owner=o.scheduler_owner or "",
                             fire=bool(o.scheduler or o.scheduler_entries))
    return Scheduling(ctx.exec, ctx.broker, ctx.clock, params, ctx.stopping, ctx.health.failed)


def _always(o: ServerOptions) -> bool:
    return True


SERVER_LOOPS: tuple[LoopSpec, ...] = (
    LoopSpec("ready-ping", lambda o: o.health_port is not None, lambda p: p.reach, start="at_once", delayed=False),
    LoopSpec("check-queues", _always, lambda p: _QueueCheck(p.ctx, list(p.options.queues)), start="connected"),
    LoopSpec("heartbeat", _always, lambda p: p.heartbeat, delayed=False, stop=_stop_heartbeat),
    LoopSpec("forwarder", _always, lambda p: p.forwarder),
    LoopSpec("recoverer", _always, lambda p: p.recoverer),
    LoopSpec("janitor", _always, lambda p: Janitor(p.ctx, JanitorParams.of(p.options))),
    LoopSpec("control", _always, lambda p: _ControlLoop(p.ctx, p.processor, p.server_id, p.heartbeat)),
    LoopSpec("propagator", _always, lambda p: Propagator(p.ctx)),
    LoopSpec("offload", _always, lambda p: BlobJanitor(p.ctx, list(p.options.queues))),
    LoopSpec("aggregation", lambda o: o.group_aggregator is not None, _aggregation),
    # an owner without entries only prunes its stale entries at start
    LoopSpec("scheduling", lambda o: bool(o.scheduler or o.scheduler_entries or o.scheduler_owner), _scheduling),
    LoopSpec("discovery", lambda o: any(map(is_queue_pattern, o.queues)),
             lambda p: Discovery(p.ctx, p.served, p.processor.serve, [p.forwarder.wake]), prepare=_first_scan),
)
"""The server's loops besides the processor, in start order (each phase starts its loops in
this order; they stop in it too, the heartbeat last). ``Server.arun`` makes those whose ``when``
holds for its options, starts each in its phase and stops them all when the processor returns."""

_Running = tuple[LoopSpec, Any, "asyncio.Task[None]"]


def _make_loops(parts: LoopParts, options: ServerOptions) -> list[tuple[LoopSpec, Loop]]:
    """The loops of :data:`SERVER_LOOPS` whose ``when`` holds for ``options``, made, in order."""
    return [(spec, spec.make(parts)) for spec in SERVER_LOOPS if spec.when(options)]


async def _prepare_loops(ctx: Context, loops: list[tuple[LoopSpec, Loop]]) -> None:
    """Await each loop's ``prepare`` (once Redis answers, before the startup hooks), in order."""
    for spec, loop in loops:
        if spec.prepare is not None:
            await spec.prepare(ctx, loop)


def _start_loops(ctx: Context, loops: list[tuple[LoopSpec, Loop]], phase: Phase) -> list[_Running]:
    """Start the tasks of the loops of ``phase`` (in table order)."""
    return [(spec, loop, asyncio.create_task(_later(ctx, loop.run) if spec.delayed else _run(loop),
                                             name=f"asynqpy-{spec.name}"))
            for spec, loop in loops if spec.start == phase]


async def _run(loop: Loop) -> None:
    await loop.run()


async def _stop_loops(running: list[_Running]) -> None:
    """Cancel the running loops, wait for them at most STOP_LOOPS_TIMEOUT together (a loop
    stuck in a client library's teardown must not keep the server up), then stop those with a
    stop of their own (the heartbeat), in order."""
    together = [task for spec, _, task in running if spec.stop is None]
    for t in together:
        t.cancel()
    if together:
        _, stuck = await asyncio.wait(together, timeout=STOP_LOOPS_TIMEOUT)
        for t in stuck:
            log.error("%s did not stop within %gs of being cancelled; leaving it, at:\n%s", t.get_name(),
                      STOP_LOOPS_TIMEOUT, _where(t))
    for spec, loop, task in running:
        if spec.stop is not None:
            await spec.stop(loop, task)


async def _wait_for_redis(ctx: Context, fail_fast: bool) -> bool:
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
            if fail_fast or not is_outage(exc):
                raise
            if ctx.health.down_since is None:
                log.warning("cannot reach Redis (%s); waiting for it, retrying with backoff (at most %gs apart; "
                            "fail_fast / --fail-fast to exit instead)", exc, MAX_BACKOFF)
                ctx.health.down_since, ctx.health.announced = time.monotonic(), True
            ctx.health.failed("connecting", exc)
        if await ctx.sleep(backoff):
            return False
        backoff = min(backoff * 2, MAX_BACKOFF)


async def _check_queues(ctx: Context, served: list[str]) -> None:
    """Warn about a served queue no task was ever enqueued to whose name is close to one that has
    tasks (a typo in ``--queues``: the worker would wait on an empty queue for good)."""
    try:
        known = {q.decode() if isinstance(q, bytes) else str(q)
                 for q in await ctx.exec.run(Call(lambda r: r, command=("SMEMBERS", ALL_QUEUES)))}
    except REDIS_ERRORS:  # forbidden by an ACL, or Redis went away again: nothing to say
        return
    for q in served:
        if q not in known:
            meant = similar_queue(q, known - set(served))
            if meant is not None:
                log.warning("queue %r has never had a task, did you mean %r? (this server serves %s)", q, meant,
                            ", ".join(served))


async def _check_redis(ctx: Context) -> None:
    """Check Redis answers and warn about a Redis that may evict task data. The served queues are
    not registered here (a typo in ``--queues`` would stay listed for good): a queue is registered
    when a task is first enqueued to it. A full Redis (maxmemory) does not stop a worker from
    starting: draining queues is how memory comes back."""
    await ctx.exec.run(Call(lambda r: r, command=("TIME",)))  # a command every role may run
    await acheck(ctx.exec, stamp=True)  # a newer store's protocol: ProtocolVersionError, before any write
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
