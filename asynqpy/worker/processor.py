"""Processor: fetches tasks (blocking when idle), runs their handlers within the concurrency limit,
and writes each outcome (done, complete, retry, archive), pipelining the outcomes of tasks that
finish together: the successes of one queue are acknowledged in one batched done call. On
shutdown it waits for running handlers, then requeues what is left.

A task's path from dequeue to done reads top-down in this module, in four sections:

1. fetching: :meth:`Processor.run` starts ``_fetch_loop``, which takes up to ``fetch_batch`` tasks
   with one ``dequeue`` script call (``_fetch_once``; when idle, ``_wait_for_work`` blocks on the
   queues' wake lists and dequeues in the same round trip) and hands them to ``_took``;
2. running: ``_start`` checks the message (signature, decoding), computes the deadline and starts
   ``_run``, an asyncio task that calls the handler chain (middleware, then the handler; a sync
   handler runs in the thread pool);
3. deciding: ``_finish`` turns the attempt into one broker ``Call`` (``_outcome``: done, complete,
   retry with the delay of ``_retry_delay``, or archive);
4. writing: ``_write`` queues the call; ``_write_loop`` sends the calls queued meanwhile in one
   pipeline (``_send_outcomes``: the plain successes of a queue go as one batched ``done``
   call) and lets go of each task (``held``) once its outcome is written. Batching adds no
   wait: what finishes while a write is in flight goes in the next one.

Elsewhere: the heartbeat renews the leases of ``held`` tasks and calls :meth:`Processor.lose` for
a lease it lost (so does the canceller, for a cancel notice); the scripts are in ``lua/`` (the
broker's ``Call``s name them)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import math
import random
import secrets
import traceback
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from ..core import codec, process, tracing
from ..core.broker import Call, Dequeued, Done, Finished
from ..core.codec import Message
from ..core.errors import (
    AsynqpyError,
    HandlerNotFoundError,
    LeaseLostError,
    MalformedMessageError,
    PayloadError,
    RateLimited,
    ResultError,
    SignatureError,
    SkipRetry,
    TaskNotFoundError,
    TaskTimeoutError,
)
from ..core.keys import queue_keys
from ..core.limits import SIGNALS_FREED_SLOT
from ..core.mux import AsyncHandler, Handler, ServeMux, not_found
from ..core.options import new_task_id
from ..core.results import pack_outcome, pack_progress
from ..core.retry import default_retry_delay
from ..core.sandbox import Sandboxed, SandboxedError, import_path
from ..core.signing import run_message
from ..core.task import Task, ms_to_datetime, set_current
from ..redisio.connection import REDIS_ERRORS, RETRYABLE
from .context import Context, Running
from .sandbox import SandboxPool
from .settings import ServerOptions
from .wake import PipelinedWait

log = logging.getLogger("asynqpy.processor")

PROGRESS_EVERY = 0.2
"""Seconds between two progress writes of one task (task.progress in a tight loop writes at
most this often; the latest value wins)."""
SHORT_WAIT = 0.25
"""A queue's limits holding its tasks back for less than this (s): the worker sleeps locally rather
than in BLPOP (Redis times blocked clients out at its cron's pace, ~100 ms)."""
EMPTY_RECHECK = 0.1
"""Seconds a queue found empty is skipped while other queues keep the server busy."""
MAX_ERROR_TEXT = 2048
"""Characters of an error's text kept with the task (its last_error)."""


MAX_TRACEBACK = 4096
"""Characters of a failed attempt's traceback kept with the task (its innermost frames)."""


def _when(ms: int) -> str:
    return f"{ms_to_datetime(ms):%Y-%m-%d %H:%M:%S} UTC"


def format_traceback(error: BaseException) -> str:
    """A failed attempt's traceback for the task's record: at most :data:`MAX_TRACEBACK`
    characters, keeping the end (the innermost frames and the error). A sandboxed handler's is
    the one from its child process."""
    remote = getattr(error, "remote_traceback", "") if isinstance(error, SandboxedError) else ""
    if remote:
        return remote if len(remote) <= MAX_TRACEBACK else "...\n" + remote[-MAX_TRACEBACK:]
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:  # noqa: BLE001 - a broken exception must not lose the task
        return ""
    return text if len(text) <= MAX_TRACEBACK else "...\n" + text[-MAX_TRACEBACK:]


def describe(error: BaseException) -> str:
    """``Type: text`` of an exception, even when its ``__str__`` itself fails (a sandboxed
    handler's exception: its own type and text, from the child process)."""
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the task
        text = "<the exception's text could not be read>"
    if isinstance(error, SandboxedError):
        return text
    return f"{type(error).__name__}: {text}"


MAX_ACK = 256
"""Most tasks one batched acknowledgement (the done script) carries."""


@dataclass
class _Outcome:
    running: Running
    call: Call[Any] | Done  # a Done is acknowledged with the other Dones of its queue, in one call
    attempts: int = 0
    what: str = field(default="")
    since: float = 0.0  # (a process input's commit) when its outcome was decided, for its metric


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004 - an object whose __call__ is a coroutine function


class Processor:
    """The fetch/run/finish engine of a server."""

    def __init__(self, ctx: Context, options: ServerOptions, mux: ServeMux, pool: Executor) -> None:
        self.ctx = ctx
        self.mux = mux
        self.pool = pool
        self.opts = options
        self.queues = list(options.queues)
        self.held: dict[tuple[str, str], Running] = {}
        self.executing: set[Running] = set()
        self._chains: dict[str, AsyncHandler] = {}
        self._slot_freed = asyncio.Event()
        self.quiet = False  # asynqpy server quiet: no new task is taken (worker/control.py)
        self._sandbox: SandboxPool | None = None  # the child processes of sandboxed handlers (made when used)
        if options.sandbox:  # every plain handler runs sandboxed: each must be importable by a child
            for pattern in mux.patterns:
                fn = mux.match(pattern)
                if fn is not None and not isinstance(fn, (Sandboxed, process.ProcessHandler)) and not _is_async(fn):
                    import_path(fn)
        self._fetcher: asyncio.Task[None] | None = None
        self._fetch_lock = asyncio.Lock()
        self._empty: dict[str, float] = {}
        self.name = options.worker_name
        self._wake_keys = {queue_keys(q).wake: q for q in self.queues}
        self._wake_keys.update({queue_keys(q).wake_for(self.name): q for q in self.queues})  # targeted tasks
        self._outcomes: list[_Outcome] = []
        self._hooks: set[asyncio.Task[None]] = set()  # on_failure hooks and progress writes running
        self._writing = 0  # outcomes taken by the writer and not settled yet
        self._outcome_ready = asyncio.Event()
        self._writes_idle = asyncio.Event()
        self._writes_idle.set()
        self._in_dequeue = False
        self._in_wait = False
        self._waiter = PipelinedWait(ctx) if PipelinedWait.supported(ctx.redis) else None
        self._down: dict[str, tuple[float, float]] = {}  # cluster: queue -> (loop time to try again, backoff)
        self._owed: str | None = None  # a queue whose wake token this server took and has not acted on yet
        self._left_behind = False  # the last dequeue left tasks in its queue (and a wake token for them)
        self._limited: dict[str, tuple[float, bool]] = {}  # queue -> (loop time its limits hold until, by concurrency)
        weights = self.opts.queues
        self._strict = sorted(self.queues, key=lambda q: -weights[q])

    async def run(self) -> None:
        """Process tasks until the server is asked to stop, then shut down gracefully."""
        writer = asyncio.create_task(self._write_loop(), name="asynqpy-writer")
        async with self._fetch_lock:
            if not self.quiet:
                self._fetcher = asyncio.create_task(self._fetch_loop(), name="asynqpy-fetcher")
        await self.ctx.stopping.wait()
        self._slot_freed.set()
        async with self._fetch_lock:
            if self._fetcher is not None:
                await self._stop_fetcher(self._fetcher)
                self._fetcher = None
            elif self._waiter is not None:
                await self._waiter.close()
        running = {r.aio for r in self.executing if r.aio is not None}
        if running:
            log.info("waiting up to %.1fs for %d running task(s)", self.opts.shutdown_timeout, len(running))
            await self._wait_running(running)
        await self._requeue_leftovers()
        try:
            await asyncio.wait_for(self._writes_idle.wait(), self.opts.lease)
        except asyncio.TimeoutError:
            log.error("gave up writing %d outcome(s); the recoverer will retry them",
                      len(self._outcomes) + self._writing)
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        if self._sandbox is not None:
            await self._sandbox.close()

    # -- 1. fetching: run() -> _fetch_loop -> _fetch_once / _wait_for_work (one dequeue script call) -> _took ---

    async def _fetch_loop(self) -> None:
        backoff = 0.05
        while not self.ctx.stopping.is_set() and not self.quiet:
            if len(self.executing) >= self.opts.concurrency:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                # two turns of the loop (no timer): handlers finishing in the same moment free
                # their slots too, and one dequeue refills them all (fewer, larger dequeues)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                continue
            try:
                count = min(self.opts.concurrency - len(self.executing), self.opts.fetch_batch)
                if self.opts.fair_dispatch:
                    # one task per dequeue; a busy server that left tasks behind queues up again
                    # behind the idle servers (Redis wakes blocked clients in the order they
                    # blocked), so a burst is dealt round-robin across servers and processes
                    count = 1
                    if self.executing and self._left_behind:
                        self._left_behind = False
                        await self._wait_for_work(count)
                        await asyncio.sleep(0)
                        continue
                if not await self._fetch_once(count):
                    if self.ctx.stopping.is_set() or self.quiet:
                        break
                    await self._wait_for_work(count)
                    await asyncio.sleep(0)  # let the tasks it brought start before the next fetch
                if not self._down:
                    self.ctx.health.ok()
                backoff = 0.05
            except REDIS_ERRORS as exc:
                self.ctx.health.failed("fetching tasks", exc)
                await self.ctx.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception:  # a bug must not stop fetching for good
                log.exception("fetching tasks failed unexpectedly; retrying in %.2fs", backoff)
                await self.ctx.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        if self._owed is not None:  # stopping with a wake token not acted on
            owed, self._owed = self._owed, None
            await self._hand_back(owed)

    async def _fetch_once(self, count: int) -> bool:
        loop = asyncio.get_running_loop()
        for q in self._order():
            marked = self._empty.get(q)
            if marked is not None and loop.time() - marked < EMPTY_RECHECK or self._is_down(q, loop.time()):
                continue
            held = self._limited.get(q)
            if held is not None and held[0] > loop.time():
                continue
            token = secrets.token_hex(4)
            lease_from, sent_ms = loop.time(), self.ctx.clock.local_ms()
            self._in_dequeue = True
            try:
                res = await self.ctx.exec.run(self.ctx.broker.dequeue(q, count, self.opts.lease_ms, token, self.name))
                self.ctx.metrics.loop("dequeue", loop.time() - lease_from)
            except REDIS_ERRORS as exc:
                if not self.ctx.cluster:
                    raise  # one server: every queue is down, the fetch loop backs off
                self._queue_failed(q, exc)
                continue
            finally:
                self._in_dequeue = False
            self._down.pop(q, None)
            if self._took(q, res, token, lease_from, sent_ms):
                return True
        return False

    async def _wait_for_work(self, count: int) -> None:
        """Block until a wake token arrives. On plain Redis the first queue's dequeue rides in the
        same round trip (see :mod:`asynqpy.wake`)."""
        now = asyncio.get_running_loop().time()
        timeout = self.opts.idle_timeout
        if self._limited:  # wake up when a queue's limits let a task through again
            timeout = min(timeout, max(0.001, min(at for at, _ in self._limited.values()) - now))
            if timeout < SHORT_WAIT:  # Redis times a blocked BLPOP out only every ~100 ms: sleep here
                await self.ctx.sleep(timeout)
                return
        if self._waiter is None:
            keys = [k for k, q in self._wake_keys.items() if not self._is_down(q, now)]
            if self._down:  # or when the next unreachable queue is due to be tried again
                timeout = min(timeout, max(0.01, min(at for at, _ in self._down.values()) - now))
            got = None
            if keys:
                got = await self.ctx.blpop_any(keys, timeout)
            else:  # every queue's master is unreachable
                await self.ctx.sleep(timeout)
            fired = got[0] if got else None
            acted = None
        else:
            q = self._order()[0]
            token = secrets.token_hex(4)
            self._in_wait = True
            try:
                fired, res, lease_from = await self._waiter.wait(
                    list(self._wake_keys), timeout,
                    self.ctx.broker.dequeue(q, count, self.opts.lease_ms, token, self.name))
            finally:
                self._in_wait = False
            self._took(q, res, token, lease_from)
            acted = q if res.tasks else None
        if fired is None:
            self._empty.clear()
            return
        owed = self._wake_keys[fired]
        self._empty.pop(owed, None)
        held = self._limited.get(owed)
        if held is not None and held[1] and not (self._waiter is not None and owed == q):
            # a token for a queue held back by its concurrency limit: a slot freed (the script that
            # freed it left the token, includes/slots.lua), so its next dequeue is owed now, not
            # at the end of the wait (unless the dequeue that rode with the wait just tried it)
            del self._limited[owed]
        if owed == acted:
            return  # the dequeue that rode with the wait took tasks of the queue whose token it was
        if len(self.executing) < self.opts.concurrency and not self.ctx.stopping.is_set() and not self.quiet:
            self._owed = owed  # the next dequeue goes to the queue whose token this was
        else:
            await self._hand_back(owed)

    async def _hand_back(self, queue: str) -> None:
        """Put back the wake token of ``queue``, which this server took but will not act on (its
        slots are full, or it is stopping): other servers of that queue must not sleep through
        its tasks until their idle timeout."""
        try:
            await self.ctx.exec.run(self.ctx.broker.rewake(queue))
        except REDIS_ERRORS as exc:
            self.ctx.health.failed(f"handing back the wake token of queue {queue}", exc)

    def _took(self, q: str, res: Dequeued, token: str, lease_from: float, sent_ms: int | None = None) -> bool:
        """Record a dequeue's result and start its tasks; True if there were any. ``sent_ms``: this
        host's time when the dequeue was sent, for the clock's offset; None for the dequeue that rode
        with an idle wait, whose reply may have been read late (a busy loop): a sample whose round
        trip is unknown would set the offset off by that delay, so it is not taken."""
        if sent_ms is not None:
            self.ctx.clock.observe(res.now_ms, sent_ms)
        self._left_behind = res.remaining > 0 and bool(res.tasks) and not res.wait_ms
        if res.wait_ms:  # the queue's limits hold its tasks back: skip it until then
            self._limited[q] = (asyncio.get_running_loop().time() + res.wait_ms / 1000, res.slot_bound)
        else:
            self._limited.pop(q, None)
        if res.remaining <= 0:
            self._empty[q] = asyncio.get_running_loop().time()
        else:
            self._empty.pop(q, None)
        for id, raw in res.tasks:
            self._start(q, id, raw, token, res.now_ms, lease_from + self.opts.lease)
        return bool(res.tasks)

    def _order(self) -> list[str]:
        """Queues in the order to try: by weight (strict) or weighted-random (default); a queue
        whose wake token this server took comes first (the token is owed a dequeue)."""
        owed, self._owed = self._owed, None
        order = self._weighted()
        if owed is not None and order[0] != owed:
            order = [owed] + [q for q in order if q != owed]
        return order

    def _weighted(self) -> list[str]:
        if self.opts.strict_priority or len(self._strict) == 1:
            return self._strict
        names = list(self.queues)
        weights = [self.opts.queues[q] for q in names]
        order = []
        while names:
            i = random.choices(range(len(names)), weights)[0]
            order.append(names.pop(i))
            weights.pop(i)
        return order

    def _is_down(self, q: str, now: float) -> bool:
        down = self._down.get(q)
        return down is not None and now < down[0]

    def _queue_failed(self, q: str, exc: Exception) -> None:
        """On a cluster, a queue whose master cannot be reached (dead, or its replica taking over)
        is skipped, with a backoff of its own, while the queues of the other masters are served."""
        down = self._down.get(q)
        backoff = min(down[1] * 2, 5.0) if down else 0.05
        self._down[q] = (asyncio.get_running_loop().time() + backoff, backoff)
        self.ctx.health.failed(f"fetching from queue {q} (retried in {backoff:.2f}s)", exc)

    # -- 2. running: _took -> _start (one asyncio task per task) -> _run (the handler, under its deadline) ---

    def _start(self, queue: str, id: str, raw: bytes, token: str, now_ms: int, lease_until: float) -> None:
        run_of = ""
        try:
            msg, run_of = run_message(self.ctx.broker.signer, queue, id, raw)
        except (MalformedMessageError, SignatureError) as exc:
            log.error("task %s in queue %s refused (%s); archiving it unrun", id, queue, exc)
            bad = codec.untrusted(raw, str(exc), now_ms)
            r = Running(queue, id, token, bad, None, lease_until, run_of=id.rpartition("|")[0] if "|" in id else "")
            self.held[(queue, id)] = r
            self._write(r, self._archive_call(r, bad, sign=False), "archive")
            return
        limits = []
        timeout_ms = msg.timeout_ms
        if timeout_ms < 0:
            timeout_ms = 0 if self.opts.default_timeout is None else int(self.opts.default_timeout * 1000)
        if timeout_ms > 0:
            limits.append(now_ms + timeout_ms)
        if msg.deadline_ms > 0:
            limits.append(msg.deadline_ms)
        deadline_ms = min(limits) if limits else 0
        task = Task(msg.type, _msg=msg, id=id, queue=queue, deadline=ms_to_datetime(deadline_ms))
        r = Running(queue, id, token, msg, task, lease_until, started_ms=now_ms, deadline_ms=deadline_ms,
                    timeout_ms=timeout_ms, started=asyncio.get_running_loop().time(), run_of=run_of)
        self.held[(queue, id)] = r
        self.executing.add(r)
        metrics = self.ctx.metrics
        if metrics.enabled:
            first = msg.retried == 0 and msg.enqueued_at_ms > 0 and not run_of
            metrics.started(queue, msg.type, (now_ms - msg.enqueued_at_ms) / 1000 if first else None)
        loop = asyncio.get_running_loop()
        def report(data: bytes, value: Any) -> None:  # from the loop, or a sync handler's thread
            r.progress = (data, value)  # the latest wins; one wake-up of the loop per write
            if not r.progress_armed:
                r.progress_armed = True
                loop.call_soon_threadsafe(self._arm_progress, r)

        task._report = report
        task._max_result = self.opts.max_result_bytes
        remaining = (deadline_ms - now_ms) / 1000 if deadline_ms else None
        r.aio = asyncio.create_task(self._run(r, remaining), name=f"asynqpy-task-{id}")

    async def _run(self, r: Running, remaining: float | None) -> None:
        # The handler runs inside this task (no wait_for: no extra task, no extra loop turn); a
        # timer cancels it at the deadline.
        assert r.task is not None
        error: BaseException | None = None
        timer = None
        if log.isEnabledFor(logging.DEBUG):
            log.debug("task started: %s", r.fields, extra=r.extra)
        tracer = tracing.current
        span = tracer.process(r.queue, r.id, r.msg) if tracer is not None else None
        try:
            if remaining is not None and remaining <= 0:
                raise TaskTimeoutError(f"the task's deadline ({_when(r.msg.deadline_ms)}) passed before it started")
            handler = self._handler_for(r.msg.type)
            if r.msg.after is not None:  # a workflow task: its parents' results, from its record
                r.task._record = await self._read_held(r.queue, r.id, self.ctx.broker.deps(r.queue, r.id),
                                                        "reading the task's parents' results")
            set_current(r.task)  # current_task() in the handler (this asyncio task's own context)
            if remaining is not None:
                timer = asyncio.get_running_loop().call_later(remaining, self._time_out, r)
            returned = await handler(r.task)
            if r.timed_out:  # the handler swallowed the cancellation
                raise asyncio.CancelledError
            if returned is not None and not r.task.has_result:  # the return value is the result,
                r.task.result = returned  # unless the handler set one with write_result
            if r.task.result is not None:
                self._check_result(r.task.result)
        except asyncio.CancelledError:
            if r.timed_out and not (r.lost or r.requeued):
                if r.msg.deadline_ms and r.msg.deadline_ms == r.deadline_ms:
                    error = TaskTimeoutError(f"the handler ran past the task's deadline ({_when(r.msg.deadline_ms)})")
                else:
                    error = TaskTimeoutError(f"the handler ran past the task's timeout ({r.timeout_ms / 1000:g}s)")
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
            elif not (r.lost or r.requeued):
                raise
        except Exception as exc:  # noqa: BLE001 - any handler failure is a task failure
            error = exc
        finally:
            if timer is not None:
                timer.cancel()
            self.executing.discard(r)
            self._slot_freed.set()
            if self.ctx.metrics.enabled:
                self.ctx.metrics.ended(r.queue, r.msg.type, asyncio.get_running_loop().time() - r.started)
                if r.lost:
                    self.ctx.metrics.outcome(r.queue, r.msg.type, "lease_lost")
            if span is not None and tracer is not None:
                outcome = "lease_lost" if r.lost else "requeued" if r.requeued else "failed" if error else "succeeded"
                tracer.processed(span, error, outcome)
        if r.lost or r.requeued:
            return
        self._finish(r, error)

    def _arm_progress(self, r: Running) -> None:
        """Schedule the write of a task's latest progress (task.progress only stores the value
        and, if no write is scheduled, asks for one): at most one write every PROGRESS_EVERY."""
        loop = asyncio.get_running_loop()
        loop.call_later(max(0.0, r.progress_at + PROGRESS_EVERY - loop.time()), self._send_progress, r)

    def _send_progress(self, r: Running) -> None:
        r.progress_armed = False  # before taking the value: a later report arms a new write
        latest, r.progress = r.progress, None
        if latest is None or r not in self.executing:
            return  # finished (its outcome clears the progress), lost or requeued
        data, value = latest
        r.progress_at = asyncio.get_running_loop().time()
        push = pack_progress(r.id, value) if r.msg.reply_to else b""
        call = self.ctx.broker.progress(r.queue, r.id, r.token, r.msg, data, push)
        r.progress_sent = True
        t = asyncio.create_task(self._write_progress(r, call), name=f"asynqpy-progress-{r.id}")
        r.progress_write = t
        self._hooks.add(t)
        t.add_done_callback(self._hooks.discard)

    async def _write_progress(self, r: Running, call: Call[int]) -> None:
        try:
            await self.ctx.exec.run(call)
        except (LeaseLostError, TaskNotFoundError):
            pass  # finished or lost meanwhile: nothing to show
        except REDIS_ERRORS as exc:
            self.ctx.health.failed(f"writing the progress of task {r.id}", exc)
        except AsynqpyError as exc:  # Redis full: progress is not worth refusing the task for
            log.debug("progress of task %s not written: %s", r.id, exc)

    def _handler_for(self, task_type: str) -> AsyncHandler:
        chain = self._chains.get(task_type)
        if chain is None:
            fn = self.mux.match(task_type) or not_found
            if isinstance(fn, process.ProcessHandler):
                chain = self._process_chain(fn)
            elif isinstance(fn, Sandboxed):
                chain = self._sandboxed(fn.path)
            elif self.opts.sandbox and fn is not not_found and not _is_async(fn):
                chain = self._sandboxed(import_path(fn))
            else:
                chain = fn if _is_async(fn) else self._threaded(fn)
            for mw in reversed(self.mux.middleware):
                chain = mw(chain)
            self._chains[task_type] = chain
        return chain

    def _process_chain(self, h: process.ProcessHandler) -> AsyncHandler:
        """A process type's inputs: read the process, run the processor (a plain one in the thread
        pool), leave the plan of its commit in ``task._proc`` (written by :meth:`_outcome`)."""
        async def run(task: Task) -> None:
            parsed = process.parse_input(task.type, task.message.key, task.payload)
            loop = asyncio.get_running_loop()
            started = loop.time()
            if parsed is not None:
                reply = await self._read_process(task, parsed[0], h.history)
                if reply:
                    task._proc = (process.parse_record(parsed[0], reply[0]), process.History(int(reply[1]),
                                                                                             list(reply[2:])))
            plan, proc, inp = h.prepare(task)
            if plan is not None:
                task._proc = plan
                return
            assert proc is not None
            if self.ctx.metrics.enabled:
                self.ctx.metrics.process_phase(h.type, "read", loop.time() - started)
            started = loop.time()
            if h.is_async:
                step = await h.fn(proc, inp)  # type: ignore[misc]
            else:
                ctx = contextvars.copy_context()
                step = await loop.run_in_executor(self.pool, functools.partial(ctx.run, h.fn, proc, inp))
            if self.ctx.metrics.enabled:
                self.ctx.metrics.process_phase(h.type, "processing", loop.time() - started)
            h.finish(task, step, self.ctx.clock.now_ms())

        return run

    def _sandboxed(self, path: str) -> AsyncHandler:
        """A handler run in the server's pool of child processes (worker/sandbox.py)."""
        async def run(task: Task) -> Any:
            if self._sandbox is None:
                o = self.opts
                self._sandbox = SandboxPool(o.sandbox_processes, o.sandbox_max_tasks, o.sandbox_max_memory_mb,
                                            o.max_result_bytes)
            r = self.held.get((task.queue, task.id))
            return await self._sandbox.run(path, task, r.deadline_ms if r is not None else 0)

        return run

    async def _read_process(self, task: Task, pid: str, history: int) -> Any:
        """A process input's process (see :meth:`_read_held`)."""
        return await self._read_held(task.queue, task.id, self.ctx.broker.proc_read(task.queue, pid, 0, history),
                                     f"reading process {pid}")

    async def _read_held(self, queue: str, id: str, call: Call[Any], what: str) -> Any:
        """A read a task needs before its handler runs (its process, its parents' results): a
        Redis outage is not the task's failure, so it is waited out (with backoff) while the
        task's lease lasts; once the lease could not be renewed in time, this server lets go of
        the task (:meth:`lose`: it is cancelled and nothing is written) and the recoverer runs
        it again when the lease expires in Redis, as for any task held through an outage."""
        loop = asyncio.get_running_loop()
        delay = 0.05
        while True:
            try:
                return await self.ctx.exec.run(call)
            except REDIS_ERRORS as exc:
                r = self.held.get((queue, id))
                if r is None or r.lost:
                    raise
                if loop.time() >= r.lease_until:
                    self.lose(r, f"Redis was unreachable while {what} until its lease ran out")
                    await asyncio.sleep(0)  # the cancellation lose() requested lands here
                    raise  # (not reached unless the task was finished meanwhile)
                self.ctx.health.failed(f"{what} (retried in {delay:.2f}s)", exc)
                await asyncio.sleep(min(delay, max(0.0, r.lease_until - loop.time())))
                delay = min(delay * 2, 2.0)

    def _threaded(self, fn: Handler) -> AsyncHandler:
        async def call(task: Task) -> Any:
            ctx = contextvars.copy_context()
            return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(ctx.run, fn, task))

        return call

    def _time_out(self, r: Running) -> None:
        r.timed_out = True
        if r.aio is not None and not r.aio.done():
            r.aio.cancel()

    # -- 3. deciding: _run -> _finish -> _outcome (done, complete, retry or archive: a broker Call) --------

    def _finish(self, r: Running, error: BaseException | None) -> None:
        """Decide and queue the write of a finished attempt. Whatever goes wrong while deciding
        (a result that cannot be stored, an exception whose text cannot be read, a broken retry
        policy), the task ends archived with the reason, never held with no outcome; if even that
        cannot be built, this server lets go of the task and the recoverer retries it when its
        lease expires."""
        try:
            call, what = self._outcome(r, error)
        except Exception as exc:
            reason = f"asynqpy could not record this attempt's outcome: {describe(exc)}"
            log.error("task %s %s (queue %s): %s; archiving it", r.msg.type, r.id, r.queue, reason, exc_info=exc)
            try:
                msg = r.msg.with_(last_error=reason[:MAX_ERROR_TEXT], last_failed_at_ms=self.ctx.clock.now_ms(),
                                  result=None)
                call, what = self._archive_call(r, msg), "archive"
            except Exception:
                log.exception("task %s (queue %s): could not archive it either; letting its lease expire",
                              r.id, r.queue)
                self.held.pop((r.queue, r.id), None)
                return
        self._write(r, call, what)

    def _check_result(self, result: Any) -> None:
        """A result that cannot be stored or sent raises ResultError (the task is archived with it,
        not retried: the attempt's side effects already ran)."""
        try:
            size = len(codec.encode_payload(result, "result"))
        except PayloadError as exc:
            raise ResultError(str(exc)) from None
        if size > self.opts.max_result_bytes:
            raise ResultError(f"result is {size} bytes, over the server's max_result_bytes "
                              f"({self.opts.max_result_bytes})")

    def _outcome(self, r: Running, error: BaseException | None) -> tuple[Call[Any] | Done, str]:
        b = self.ctx.broker
        took = asyncio.get_running_loop().time() - r.started
        if error is None:
            level = logging.INFO if self.opts.log_success else logging.DEBUG  # ServerOptions.log_success
            if log.isEnabledFor(level):
                log.log(level, "task succeeded in %.3fs: %s", took, r.fields, extra={**r.extra, "duration": took})
            assert r.task is not None
            result = r.task.result
            r.ended = (True, result)
            if r.run_of:  # a run of a targeted task: its record says the worker succeeded
                return b.run_end(r.queue, r.run_of, r.msg, "s", run=r.id, token=r.token, result=result), "run"
            if isinstance(r.task._proc, process.Plan):
                return self._commit_call(r, r.task._proc), "complete"
            reply = pack_outcome(r.id, True, result) if r.msg.reply_to else b""
            if r.msg.retention_ms > 0:
                msg = r.msg.with_(completed_at_ms=self.ctx.clock.now_ms(), result=result)
                return b.complete(r.queue, r.id, r.token, msg, reply), "complete"
            data = b"" if result is None else codec.encode_payload(result, "result")
            return Done(r.id, r.token, r.msg, reply, progressed=r.progress_sent, result=data), "done"
        if isinstance(error, RateLimited):  # a spent quota, not a failure: wait, then run again
            log.info("task rate limited after %.3fs, runs again in %.1fs: %s", took, error.retry_in, r.fields,
                     extra={**r.extra, "duration": took, "retry_in": error.retry_in})
            r.ended = None
            if r.run_of:  # given back: this worker may take a run of it again
                return b.run_end(r.queue, r.run_of, r.msg, "g", run=r.id, token=r.token), "run"
            return b.snooze(r.queue, r.id, r.token, error.retry_in * 1000), "snooze"
        text = describe(error)[:MAX_ERROR_TEXT]
        failed = r.msg.with_(last_error=text, last_failed_at_ms=self.ctx.clock.now_ms(),
                             traceback=format_traceback(error))
        unknown = isinstance(error, HandlerNotFoundError)
        quiet = unknown or isinstance(error, (TaskTimeoutError, SkipRetry))  # their traceback says nothing
        extra = {**r.extra, "duration": took, "error": text}
        if r.run_of:  # a failed run: another worker may take its place; the task counts a failure, and
            # is archived when they exceed its max_retry (at once for SkipRetry and the like)
            now = isinstance(error, (SkipRetry, ResultError)) or (unknown and self.opts.unknown_type == "archive")
            log.warning("run of targeted task %s failed after %.3fs: %s error=%s", r.run_of, took, r.fields, text,
                        exc_info=None if quiet else error, extra=extra)
            self._on_failure(r, error, not now)
            r.ended = (False, text)
            return b.run_end(r.queue, r.run_of, r.msg, "f", run=r.id, token=r.token, failed=failed,
                             max_retry=-1 if now else None), "run"
        if isinstance(error, SkipRetry) or isinstance(error, ResultError) or r.msg.retried >= r.msg.max_retry or (
            unknown and self.opts.unknown_type == "archive"
        ):
            why = "" if isinstance(error, (SkipRetry, ResultError)) or unknown else \
                f" (no retries left: {r.msg.retried} of {r.msg.max_retry})"
            log.warning("task failed after %.3fs, archiving it%s: %s error=%s", took, why, r.fields, text,
                        exc_info=None if quiet else error, extra=extra)
            self._on_failure(r, error, False)
            return self._archive_call(r, failed, mark_process=not isinstance(error, process.Refused)), "archive"
        delay = self._retry_delay(r, error)
        log.warning("task failed after %.3fs, retrying in %.1fs: %s error=%s", took, delay, r.fields, text,
                    exc_info=None if quiet else error, extra={**extra, "retry_in": delay})
        self._on_failure(r, error, True)
        msg = failed.with_(retried=r.msg.retried + 1)
        return b.retry(r.queue, r.id, r.token, msg, delay * 1000), "retry"

    def _on_failure(self, r: Running, error: BaseException, will_retry: bool) -> None:
        """Start the server's ``on_failure`` hook, if any, for a failed attempt (in the background:
        the outcome's write does not wait for it). What the hook raises is logged."""
        hook = self.opts.on_failure
        if hook is None or r.task is None:
            return
        task = r.task

        async def call() -> None:
            try:
                if _is_async(hook):
                    await hook(task, error, will_retry)
                else:
                    await asyncio.get_running_loop().run_in_executor(self.pool, hook, task, error, will_retry)
            except Exception:
                log.exception("the on_failure hook failed for task %s (queue %s)", task.id, task.queue)

        t = asyncio.create_task(call(), name=f"asynqpy-on-failure-{r.id}")
        self._hooks.add(t)
        t.add_done_callback(self._hooks.discard)

    def _retry_delay(self, r: Running, error: BaseException) -> float:
        """Seconds until the next attempt: the task's own ``retry_delay``, else the server's policy.
        A policy that fails or returns something other than a number >= 0 (NaN, inf, a negative
        number, a string) is logged and replaced by the default policy; a delay longer than
        :data:`~asynqpy.broker.MAX_DELAY_MS` is capped to it (by the broker)."""
        if r.msg.retry_delay_ms >= 0:
            return r.msg.retry_delay_ms / 1000
        assert r.task is not None
        try:
            delay = self.opts.retry_delay(r.msg.retried, error, r.task)
            if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay < math.inf:
                raise ValueError(f"it returned {delay!r}, not a number of seconds >= 0")
            return float(delay)
        except Exception as exc:  # noqa: BLE001 - a broken policy must not lose the task
            log.error("the retry_delay policy failed for task %s (%s); using the default policy", r.id,
                      describe(exc))
            return default_retry_delay(r.msg.retried, error, r.task)

    def _commit_call(self, r: Running, plan: process.Plan) -> Call[Any]:
        """The input's completion with the processor's step (``proc_commit``); a timer it set is a
        new timeout input with the input's own options."""
        now = self.ctx.clock.now_ms()
        r.ended = (True, plan.response)
        timer = None
        if plan.timer == "s" and not plan.skipped and not plan.remove:
            pid = plan.pid
            tmsg = Message(type=r.msg.type, payload=process.input_payload(pid, "timeout", None), enqueued_at_ms=now,
                           max_retry=r.msg.max_retry, timeout_ms=r.msg.timeout_ms, retention_ms=r.msg.retention_ms,
                           retry_delay_ms=r.msg.retry_delay_ms, headers=r.msg.headers, priority=r.msg.priority,
                           key=r.msg.key)
            timer = (new_task_id(), tmsg)
        reply = pack_outcome(r.id, True, plan.response) if r.msg.reply_to else b""
        msg = r.msg.with_(completed_at_ms=now, result=plan.response) if r.msg.retention_ms > 0 else r.msg
        return self.ctx.broker.proc_commit(r.queue, r.id, r.token, msg, plan, timer, reply)

    def _archive_call(self, r: Running, msg: Message, sign: bool = True, mark_process: bool = True) -> Call[Any]:
        r.ended = (False, msg.last_error)
        if r.run_of:  # the run's failure archives the targeted task at once
            return self.ctx.broker.run_end(r.queue, r.run_of, msg, "f", run=r.id, token=r.token, failed=msg,
                                           max_retry=-1, sign=sign)
        reply = pack_outcome(r.id, False, msg.last_error) if msg.reply_to else b""
        return self.ctx.broker.archive(
            r.queue, r.id, r.token, msg, self.opts.archive_max_size, int(self.opts.archive_max_age * 1000), sign,
            outcome=reply, mark_process=mark_process,
        )

    # -- 4. writing: _finish -> _write -> _write_loop (outcomes of tasks that finish together, pipelined) ---

    def _write(self, r: Running, call: Call[Any] | Done, what: str) -> None:
        if self.ctx.metrics.enabled:
            self._count(r, what)
        since = asyncio.get_running_loop().time() if r.task is not None and isinstance(r.task._proc, process.Plan) \
            else 0.0
        self._outcomes.append(_Outcome(r, call, what=what, since=since))
        self._writes_idle.clear()
        self._outcome_ready.set()

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._outcomes:
                self._writes_idle.set()
                self._outcome_ready.clear()
                await self._outcome_ready.wait()
                continue
            batch, self._outcomes = self._outcomes, []
            self._writing = len(batch)
            # a progress write still in flight goes first: pushed after the outcome, a waiting
            # caller (Client.call's on_progress) would never see it
            writing = [o.running.progress_write for o in batch
                       if o.running.progress_write is not None and not o.running.progress_write.done()]
            if writing:
                await asyncio.wait(writing, timeout=1.0)
            batch, results = await self._send_outcomes(batch)
            again: list[_Outcome] = []
            replies: list[Call[Any]] = []
            for o, res in zip(batch, results):
                r = o.running
                if o.since and self.ctx.metrics.enabled and not isinstance(res, Exception):
                    self.ctx.metrics.process_phase(r.msg.type[len(process.TYPE_PREFIX):], "commit",
                                                   loop.time() - o.since)
                if isinstance(res, Finished) and res.told:
                    self.ctx.kick_outbox(r.queue)
                if isinstance(res, Finished) and res.late and r.ended is not None:
                    outcome = pack_outcome(r.id, *r.ended)
                    replies += [self.ctx.broker.reply(r.queue, inbox, outcome) for inbox in res.late]
                if isinstance(res, RETRYABLE) and not r.lost:
                    if loop.time() < r.lease_until:
                        o.attempts += 1
                        again.append(o)
                        continue
                    log.error("could not write %s of task %s before its lease ran out (%s); "
                              "the recoverer will retry it", o.what, r.id, res)
                elif isinstance(res, LeaseLostError):
                    log.warning("late %s of task %s refused: %s", o.what, r.id, res)
                elif isinstance(res, TaskNotFoundError):
                    log.warning("task %s vanished before its %s was written", r.id, o.what)
                elif isinstance(res, Exception):
                    log.error("writing %s of task %s failed: %r", o.what, r.id, res)
                if self.held.get((r.queue, r.id)) is r:
                    del self.held[(r.queue, r.id)]
            if again:
                delay = min(0.05 * 2 ** max(o.attempts for o in again), 2.0)
                self.ctx.health.failed(f"writing {len(again)} outcome(s) (retried in {delay:.2f}s)",
                                       next(r for r in results if isinstance(r, Exception)))
                await asyncio.sleep(delay)
                self._outcomes[:0] = again
            elif not any(isinstance(r, RETRYABLE) for r in results):
                self.ctx.health.ok()
            if replies:
                await self._reply(replies)
            self._writing = 0

    def _count(self, r: Running, what: str) -> None:
        """The attempt's outcome in the metrics (a failed attempt counts as failed, and as what
        became of it)."""
        m, q, t = self.ctx.metrics, r.queue, r.msg.type
        if what in ("done", "complete") or (what == "run" and r.ended is not None and r.ended[0]):
            m.outcome(q, t, "succeeded")
        elif what == "snooze" or (what == "run" and r.ended is None):
            m.outcome(q, t, "snoozed")
        else:
            m.outcome(q, t, "failed")
            m.outcome(q, t, "archived" if what == "archive" else "retried")

    async def _send_outcomes(self, batch: list[_Outcome]) -> tuple[list[_Outcome], list[Any]]:
        """Write ``batch`` in one pipeline: each retry, archive or complete as its own script call,
        the successes of each queue (``Done``) as one batched done call per queue (at most
        :data:`MAX_ACK` tasks each). Returns the outcomes and, in the same order, each one's
        result: the parsed reply or the exception its write met."""
        calls: list[Call[Any]] = []
        groups: list[list[_Outcome] | None] = []  # per call: the outcomes of a batched done, else None
        single: list[_Outcome] = []
        acks: dict[str, list[tuple[_Outcome, Done]]] = {}
        unsignalled: dict[str, None] = {}  # queues of outcomes whose script wakes no worker for the slot
        for o in batch:
            if isinstance(o.call, Done):
                acks.setdefault(o.running.queue, []).append((o, o.call))
            else:
                calls.append(o.call)
                single.append(o)
                groups.append(None)
                if o.call.script not in SIGNALS_FREED_SLOT:
                    unsignalled[o.running.queue] = None
        for queue, done in acks.items():
            for i in range(0, len(done), MAX_ACK):
                chunk = done[i:i + MAX_ACK]
                calls.append(self.ctx.broker.done_many(queue, [d for _, d in chunk]))
                groups.append([o for o, _ in chunk])
        # a slot freed by a script that does not wake a worker for it (retry, snooze, a run's end:
        # includes/slots.lua) is announced by a rewake of its queue in the same pipeline, so the
        # workers a concurrency limit holds back do not sleep through it (its reply is not used)
        for queue in unsignalled:
            calls.append(self.ctx.broker.rewake(queue))
            groups.append([])
        started = asyncio.get_running_loop().time()
        try:
            replies = await self.ctx.exec.run_many(calls)
        except REDIS_ERRORS as exc:
            replies = [exc] * len(calls)
        self.ctx.metrics.loop("ack", asyncio.get_running_loop().time() - started)
        order: list[_Outcome] = []
        results: list[Any] = []
        singles = iter(single)
        for group, reply in zip(groups, replies):
            if group is None:
                order.append(next(singles))
                results.append(reply)
            else:
                order += group
                results += reply if isinstance(reply, list) else [reply] * len(group)
        return order, results

    async def _reply(self, calls: list[Call[Any]]) -> None:
        """Notify the waiters that started waiting after their task's enqueue (the finishing script
        named their inboxes). If this fails, they learn the outcome at their next recheck (if the
        task's result is kept, else as "not found")."""
        try:
            results = await self.ctx.exec.run_many(calls)
        except REDIS_ERRORS as exc:
            results = [exc]
        for res in results:
            if isinstance(res, Exception):
                log.warning("could not notify %d waiter(s) of finished tasks: %s", len(calls), res)
                break

    # -- lease loss (heartbeat, canceller) and shutdown (run) ----------------------------------------------

    def lose(self, r: Running, why: str) -> None:
        """Stop a task whose lease this server no longer holds: cancel it, write nothing."""
        if r.lost or self.held.get((r.queue, r.id)) is not r or r not in self.executing:
            return  # lost already; or finished: its outcome's write (in flight, or written and
            # crossed by this lease renewal) is checked against the lease by its own script
        r.lost = True
        del self.held[(r.queue, r.id)]
        if r.aio is not None and not r.aio.done():
            r.aio.cancel()
        log.warning("lost the lease on task %s (queue %s): %s; cancelled it", r.id, r.queue, why)

    async def _wait_running(self, running: set[asyncio.Task[None]]) -> None:
        """Wait for running handlers until they finish, ``shutdown_timeout`` passes, or a second
        stop signal (``ctx.hurry``) asks to stop now."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.opts.shutdown_timeout
        hurry = asyncio.ensure_future(self.ctx.hurry.wait())
        pending: set[asyncio.Future[Any]] = set(running)
        try:
            while pending and not hurry.done():
                left = deadline - loop.time()
                if left <= 0:
                    break
                _, pending = await asyncio.wait(pending | {hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(hurry)
        finally:
            hurry.cancel()

    async def set_quiet(self, quiet: bool) -> None:
        """Stop taking new tasks (``quiet``: the running ones go on and are written) or take
        them again; returns once it holds (a dequeue in flight is let finish first, so no task is
        taken after this returns)."""
        async with self._fetch_lock:
            self.quiet = quiet
            if quiet and self._fetcher is not None:
                await self._stop_fetcher(self._fetcher, close=False)
                self._fetcher = None
            elif not quiet and self._fetcher is None and not self.ctx.stopping.is_set():
                self._fetcher = asyncio.create_task(self._fetch_loop(), name="asynqpy-fetcher")

    async def _stop_fetcher(self, fetcher: asyncio.Task[None], close: bool = True) -> None:
        """Stop fetching without losing a dequeue in flight: a dequeue is let finish, a pipelined
        wait is unblocked (its dequeue then completes), anything else is cancelled."""
        while not fetcher.done():
            if self._in_wait and self._waiter is not None:
                try:
                    await self._waiter.unblock()
                except REDIS_ERRORS as exc:
                    log.warning("could not unblock the idle wait: %s", exc)
                    fetcher.cancel()
            elif not self._in_dequeue:
                fetcher.cancel()
            await asyncio.wait([fetcher], timeout=0.05)
        if close and self._waiter is not None:
            await self._waiter.close()

    async def _requeue_leftovers(self) -> None:
        left = list(self.executing)
        if not left:
            return
        for r in left:
            r.requeued = True
            self.ctx.metrics.outcome(r.queue, r.msg.type, "requeued")
            if r.aio is not None:
                r.aio.cancel()
        calls = [self.ctx.broker.run_end(r.queue, r.run_of, r.msg, "g", run=r.id, token=r.token) if r.run_of
                 else self.ctx.broker.requeue(r.queue, r.id, r.token) for r in left]
        try:
            results = await self.ctx.exec.run_many(calls)
        except REDIS_ERRORS as exc:
            results = [exc] * len(left)
        for r, res in zip(left, results):
            if isinstance(res, Exception):
                log.error("could not requeue task %s (%s); the recoverer will retry it", r.id, res)
            else:
                log.info("requeued unfinished task %s (queue %s)", r.id, r.queue)
            self.held.pop((r.queue, r.id), None)
        await asyncio.wait([r.aio for r in left if r.aio is not None], timeout=1.0)

