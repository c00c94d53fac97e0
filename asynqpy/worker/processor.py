"""Processor: fetches tasks (blocking when idle), runs their handlers within the concurrency limit,
decides each attempt's outcome and hands it to the writer. On shutdown it waits for running
handlers, then requeues what is left. A task's path from dequeue to done reads top-down here:

1. fetching: :meth:`Processor.run` starts ``_fetch_loop``, which takes up to ``fetch_batch`` tasks
   with one ``dequeue`` script call (``_fetch_once``, trying the queues in the order of
   ``worker/queues.py``; when idle, ``_wait_for_work`` blocks on the queues' wake lists and
   dequeues in the same round trip) and hands them to ``_took``;
2. running: ``_start`` checks the message (signature, decoding), computes the deadline and starts
   ``_run``, an asyncio task that awaits the handler chain (``worker/runner.py``: middleware, then
   the handler, in the thread pool, a sandbox process, or as a durable process's input);
3. finishing: ``_finish`` decides the outcome with :func:`asynqpy.core.outcome.decide` (done,
   complete, commit, snooze, retry with its delay, archive, or a targeted run's end), logs it,
   starts the ``on_failure`` hook and hands it to the writer (``worker/writer.py``), which writes
   the outcomes of tasks that finish together in one pipeline and lets go of each task (``held``).

Elsewhere: the heartbeat renews the leases of ``held`` tasks and calls :meth:`Processor.lose` for
a lease it lost (so does the canceller, for a cancel notice)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Any

from redis.exceptions import ResponseError

from ..core import process, tracing
from ..core.broker import Dequeued
from ..core.errors import MalformedMessageError, SignatureError, TaskTimeoutError
from ..core.keys import queue_keys, wait_stop
from ..core.mux import ServeMux
from ..core.outcome import Action, Kind, Outcome, Policy, check_result, decide, quiet, refused, unrecorded
from ..core.signing import run_message
from ..core.task import Task, ms_to_datetime, set_current
from ..redisio.connection import REDIS_ERRORS
from .context import Context, Running
from .queues import EMPTY_RECHECK, FEW_QUEUES, QueueOrder
from .runner import Runner
from .settings import ServerOptions
from .threadpool import DaemonThreadPool
from .wake import PipelinedWait
from .writer import Writer

log = logging.getLogger("asynqpy.processor")

POLL_EVERY_FETCH = 100
"""Serving at most this many queues, a busy fetch polls the other queues' wake lists every time
(one LMPOP); with more, at most every :data:`EMPTY_RECHECK` s (the LMPOP reads every list)."""

SHORT_WAIT = 0.25
"""A queue's limits holding its tasks back for less than this (s): the worker sleeps locally rather
than in BLPOP (Redis times blocked clients out at its cron's pace, ~100 ms)."""


def _when(ms: int) -> str:
    return f"{ms_to_datetime(ms):%Y-%m-%d %H:%M:%S} UTC"


class Processor:
    """The fetch/run/finish engine of a server."""

    def __init__(self, ctx: Context, options: ServerOptions, mux: ServeMux, pool: Executor) -> None:
        self.ctx = ctx
        self.opts = options
        self.name = options.worker_name
        self.held: dict[tuple[str, str], Running] = {}
        self.executing: set[Running] = set()
        self.quiet = False  # asynqpy server quiet: no new task is taken (worker/control.py)
        self.concurrency = options.concurrency  # handlers at once (asynqpy server scale: set_concurrency)
        self._pool = pool
        self.runner = Runner(ctx, options, mux, pool, self)
        self.writer = Writer(ctx, options, self.held, self.executing)
        self.policy = Policy(options.retry_delay, options.unknown_type)
        self._slot_freed = asyncio.Event()
        self._fetcher: asyncio.Task[None] | None = None
        self._fetch_lock = asyncio.Lock()
        self._running = False  # run() started the fetcher (serve() restarts it)
        self._restart = False  # serve(): the fetcher ends its loop (handing back its wake tokens)
        self._in_dequeue = self._in_wait = False  # a dequeue, or an idle wait, in flight (_stop_fetcher)
        self._in_call = False  # a call that pops or puts back a wake token in flight (_poll, _hand_back)
        self._riding = 0  # the count of the dequeue riding with the idle wait in flight (0: none)
        self._waiter = PipelinedWait(ctx) if PipelinedWait.supported(ctx.redis) else None
        # without the pipelined wait (fakeredis, a client of another type), the idle BLPOP also
        # blocks on a list of this processor's own, which _stop_fetcher pushes to to end it (a
        # cluster's per-key BLPOPs are still cancelled)
        self._stop_key = wait_stop(secrets.token_hex(8)) if self._waiter is None and not ctx.cluster else None
        self._left_behind = False  # the last dequeue left tasks in its queue (and a wake token for them)
        self._set_queues(options.queues)
        self._polled = float("-inf")  # loop time of the last non-blocking poll of the wake lists
        self._lmpop = True  # the server has LMPOP (Redis 7.0+)
        self.dequeued: Callable[[str], None] | None = None  # told each queue this server took tasks of

    def _set_queues(self, queues: Mapping[str, int]) -> None:
        """Fetch from ``queues`` (name -> weight) from now on."""
        before = getattr(self, "_queues", None)
        self._queues = QueueOrder(queues, self.opts.strict_priority)
        if before is not None:  # (the queues it served already are not fresh: only the new ones are looked at)
            self._queues.fresh.difference_update(before.queues)
            # what the stopped fetcher knew goes on: a wake token it took and had not acted on yet
            # (owed: it was stopped between the pop and the dequeue) and the queues it knew to have work
            known = before.backlog | ({before.owed} if before.owed is not None else set())
            self._queues.backlog.update(known & set(self._queues.queues))
        self._wake_keys = {queue_keys(q).wake: q for q in queues}
        self._wake_keys.update({queue_keys(q).wake_for(self.name): q for q in queues})  # targeted tasks
        self._keys_of = {q: (queue_keys(q).wake, queue_keys(q).wake_for(self.name)) for q in queues}
        self._key_order: list[str] | None = None  # the wake lists in the order of the weights (_wait_keys)
        self._key_drawn = 0.0  # loop time that order was drawn

    async def serve(self, queues: Mapping[str, int]) -> None:
        """Fetch from ``queues`` from now on (the server's queues changed: a pattern matched a new
        queue, or a queue it had matched was dropped). The fetcher is stopped as for ``quiet``
        (a dequeue in flight completes, an idle wait is unblocked) and started again at once over
        the new queues: a new queue's wake token, left by its first enqueue, is taken by the next
        wait. The running tasks are not touched."""
        async with self._fetch_lock:
            fetcher, self._fetcher = self._fetcher, None
            if fetcher is not None:
                self._restart = True
                try:
                    await self._stop_fetcher(fetcher, close=False)
                finally:
                    self._restart = False
            self._set_queues(queues)
            if self._running and not self.quiet and not self.ctx.stopping.is_set():
                self._fetcher = asyncio.create_task(self._fetch_loop(), name="asynqpy-fetcher")

    async def run(self) -> None:
        """Process tasks until the server is asked to stop, then shut down gracefully."""
        writer = asyncio.create_task(self.writer.run(), name="asynqpy-writer")
        async with self._fetch_lock:
            self._running = True
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
        if self.executing:
            await self.writer.requeue(list(self.executing))
        await self.writer.drain(self.opts.lease)
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        await self.runner.close()

    # -- 1. fetching: run() -> _fetch_loop -> _fetch_once / _wait_for_work (one dequeue script call) -> _took ---

    def _by_token(self) -> bool:
        """Whether this server fetches by wake token (more than :data:`FEW_QUEUES` queues on a
        single Redis with LMPOP) rather than trying every queue."""
        return not self.ctx.cluster and self._lmpop and len(self._queues.queues) > FEW_QUEUES

    async def _fetch_loop(self) -> None:
        backoff = 0.05
        self._queues.scan_from(self.opts.idle_timeout, asyncio.get_running_loop().time())
        while not self.ctx.stopping.is_set() and not self.quiet and not self._restart:
            if len(self.executing) >= self.concurrency:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                # two turns of the loop (no timer): handlers finishing in the same moment free
                # their slots too, and one dequeue refills them all (fewer, larger dequeues)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                continue
            if not self._queues.queues:  # patterns that match no queue yet: serve() restarts this loop
                await self.ctx.sleep(self.opts.idle_timeout)
                continue
            try:
                count = min(self.concurrency - len(self.executing), self.opts.fetch_batch)
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
                    if self.ctx.stopping.is_set() or self.quiet or self._restart:
                        break
                    await self._wait_for_work(count)
                    await asyncio.sleep(0)  # let the tasks it brought start before the next fetch
                if not self._queues.down:
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
        if self._queues.owed is not None:  # stopping with a wake token not acted on
            owed, self._queues.owed = self._queues.owed, None
            await self._hand_back(owed)
        if self._by_token():
            # and the tokens of queues it took, polling, and left
            for q in list(self._queues.backlog):
                await self._hand_back(q)

    async def _fetch_once(self, count: int) -> bool:
        """One fetch: on a single server, the queue whose wake token this server took, then the
        queues it knows have tasks left (a non-blocking poll of the wake lists, at most every
        :data:`EMPTY_RECHECK` s while busy, notices the others): O(1) round trips, never a dequeue
        per queue served. On a cluster (or a server without LMPOP), and serving a few queues
        (:data:`FEW_QUEUES`), every queue not skipped: a queue is tried again :data:`EMPTY_RECHECK`
        s after it was found empty, which also finds what no token announced (the runs of a
        targeted task that a worker which could not take them woke for)."""
        loop = asyncio.get_running_loop()
        if not self._by_token():
            order = self._queues.order()
        else:
            if self._queues.fresh:
                await self._look_fresh()
            now = loop.time()
            if self._queues.backlog and len(self._queues.backlog) < len(self._queues.queues) and (
                    len(self._queues.queues) <= POLL_EVERY_FETCH or now - self._polled >= EMPTY_RECHECK):
                self._polled = now
                await self._poll(now)
            order = self._queues.candidates(now)
        for q in order:
            if self._queues.skip(q, loop.time()):
                continue
            token = secrets.token_hex(4)
            lease_from, sent_ms = loop.time(), self.ctx.clock.local_ms()
            self._in_dequeue = True
            try:
                res = await self.ctx.exec.run(self.ctx.broker.dequeue(q, count, self.opts.lease_ms, token, self.name,
                                                                          self.opts.version_code))
                self.ctx.metrics.loop("dequeue", loop.time() - lease_from)
            except REDIS_ERRORS as exc:
                if not self.ctx.cluster:
                    raise  # one server: every queue is down, the fetch loop backs off
                # a cluster: the queues of the other masters are served meanwhile
                backoff = self._queues.failed(q, loop.time())
                self.ctx.health.failed(f"fetching from queue {q} (retried in {backoff:.2f}s)", exc)
                continue
            finally:
                self._in_dequeue = False
            self._queues.down.pop(q, None)
            if self._took(q, res, token, lease_from, sent_ms):
                return True
        return False

    async def _look_fresh(self) -> None:
        """The queues new to this server (all of them at its start, then each a pattern brings
        in): with a version, those holding tasks set aside for a version up to this server's
        (by a worker of an older one; no wake token announces them) go into the backlog, so its
        dequeue takes them back (one pipelined ``ZRANGEBYSCORE ... LIMIT 0 1`` per queue, once)."""
        fresh = sorted(self._queues.fresh)
        self._queues.fresh.clear()
        version = self.opts.version_code
        if not version:
            return
        held = await self.ctx.exec.run_many([self.ctx.broker.version_held(q, version) for q in fresh])
        for q, any_held in zip(fresh, held):
            if any_held is not False:  # (a failed read too: look at the queue)
                self._queues.backlog.add(q)

    async def _poll(self, now: float) -> None:
        """While busy with the queues known to have tasks: pop, without blocking, the wake token
        of the first other queue (in the order of the weights) that has one, and count it among
        them (single server: one LMPOP)."""
        backlog = self._queues.backlog
        keys = [k for k in self._wait_keys(now) if self._wake_keys[k] not in backlog]
        self._in_call = True  # (not cancelled in flight: its reply is a token)
        try:
            popped = await self.ctx.redis.execute_command("LMPOP", len(keys), *keys, "LEFT")
        except ResponseError as exc:  # a server older than Redis 7.0: try every queue, as on a cluster
            log.warning("the server has no LMPOP (%s): each fetch tries every queue", exc)
            self._lmpop = False
            return
        finally:
            self._in_call = False
        if popped:
            key = popped[0].decode() if isinstance(popped[0], bytes) else str(popped[0])
            q = self._wake_keys[key]
            self._queues.woken(q, by_dequeue=False)
            backlog.add(q)

    def _wait_keys(self, now: float) -> list[str]:
        """The wake lists in the order a token is taken from them (BLPOP and LMPOP pop the first
        list, in argument order, that has one): by weight, or a weighted-random order drawn at most
        every :data:`EMPTY_RECHECK` s (O(K log K) each)."""
        if self._key_order is None or (not self._queues.strict and now - self._key_drawn >= EMPTY_RECHECK):
            self._key_drawn = now
            self._key_order = [k for q in self._queues.ranked(self._queues.queues) for k in self._keys_of[q]]
        return self._key_order

    async def _wait_for_work(self, count: int) -> None:
        """Block until a wake token arrives. On plain Redis the first queue's dequeue rides in the
        same round trip (see :mod:`asynqpy.wake`)."""
        now = asyncio.get_running_loop().time()
        timeout = self.opts.idle_timeout
        if self._by_token():  # or when the scan's next queue is due (a token may have been lost)
            timeout = min(timeout, max(0.01, self._queues.scan_in(now)))
        if self._queues.limited:  # wake up when a queue's limits let a task through again
            timeout = self._queues.wait_timeout(timeout, now)
            if timeout < SHORT_WAIT:  # Redis times a blocked BLPOP out only every ~100 ms: sleep here
                await self.ctx.sleep(timeout)
                return
        tried = acted = None
        if self._waiter is None:
            keys = [k for k in self._wait_keys(now) if not self._queues.is_down(self._wake_keys[k], now)]
            timeout = self._queues.next_up(timeout, now)  # or when an unreachable queue is due again
            got = None
            if keys and self._stop_key is not None:
                self._in_wait = True  # (_stop_fetcher ends it with a push to the stop list, never a cancel)
                try:
                    got = await self.ctx.blpop_any([*keys, self._stop_key], timeout)
                finally:
                    self._in_wait = False
                if got is not None and got[0] == self._stop_key:
                    got = None
            elif keys:
                got = await self.ctx.blpop_any(keys, timeout)
            else:  # every queue's master is unreachable
                await self.ctx.sleep(timeout)
            fired = got[0] if got else None
        else:
            # the dequeue that rides with the wait: worth it when it is likely the queue that fires
            # (a few queues); with many, the token says which queue to dequeue next. Not with a
            # clock that tells scripts its time (a FakeClock): the call is built before the wait,
            # so a clock moved during it would lease the task at the time before the move
            # (the free slots again: a resize down while this fetch's dequeue was in flight)
            count = min(count, self.concurrency - len(self.executing))
            tried = self._queues.first() \
                if count > 0 and len(self._queues.queues) <= FEW_QUEUES and not self.ctx.clock.script_now() else None
            token = secrets.token_hex(4)
            self._in_wait = True
            self._riding = count if tried is not None else 0
            try:
                fired, res, lease_from = await self._waiter.wait(
                    self._wait_keys(now), timeout,
                    self.ctx.broker.dequeue(tried, count, self.opts.lease_ms, token, self.name, self.opts.version_code)
                    if tried is not None else None)
            finally:
                self._in_wait = False
                self._riding = 0
            if tried is not None and res is not None:
                self._took(tried, res, token, lease_from)
                acted = tried if res.tasks else None
        if fired is None:
            self._queues.empty.clear()
            return
        owed = self._wake_keys[fired]
        self._queues.woken(owed, by_dequeue=owed == tried)
        if owed == acted:
            return  # the dequeue that rode with the wait took tasks of the queue whose token it was
        if len(self.executing) < self.concurrency and not self.ctx.stopping.is_set() and not self.quiet:
            self._queues.owed = owed  # the next dequeue goes to the queue whose token this was
        else:
            await self._hand_back(owed)

    async def _hand_back(self, queue: str) -> None:
        """Put back the wake token of ``queue``, which this server took but will not act on (its
        slots are full, or it is stopping): other servers of that queue must not sleep through
        its tasks until their idle timeout."""
        self._in_call = True
        try:
            await self.ctx.exec.run(self.ctx.broker.rewake(queue))
        except REDIS_ERRORS as exc:
            self.ctx.health.failed(f"handing back the wake token of queue {queue}", exc)
        finally:
            self._in_call = False

    def _took(self, q: str, res: Dequeued, token: str, lease_from: float, sent_ms: int | None = None) -> bool:
        """Record a dequeue's result and start its tasks; True if there were any. ``sent_ms``: this
        host's time when the dequeue was sent, for the clock's offset; None for the dequeue that rode
        with an idle wait, whose reply may have been read late (a busy loop): a sample whose round
        trip is unknown would set the offset off by that delay, so it is not taken."""
        if sent_ms is not None:
            self.ctx.clock.observe(res.now_ms, sent_ms)
        self._left_behind = res.remaining > 0 and bool(res.tasks) and not res.wait_ms
        self._queues.took(q, res, asyncio.get_running_loop().time())
        if res.tasks and self.dequeued is not None:
            self.dequeued(q)
        for id, raw in res.tasks:
            self._start(q, id, raw, token, res.now_ms, lease_from + self.opts.lease)
        return bool(res.tasks)

    # -- 2. running: _took -> _start (one asyncio task per task) -> _run (the handler, under its deadline) ---

    def _start(self, queue: str, id: str, raw: bytes, token: str, now_ms: int, lease_until: float) -> None:
        run_of = ""
        try:
            msg, run_of = run_message(self.ctx.broker.signer, queue, id, raw)
        except (MalformedMessageError, SignatureError) as exc:
            log.error("task %s in queue %s refused (%s); archiving it unrun", id, queue, exc)
            o = refused(raw, str(exc), now_ms)
            r = Running(queue, id, token, o.msg, None, lease_until, run_of=id.rpartition("|")[0] if "|" in id else "")
            self.held[(queue, id)] = r
            self.writer.put(r, o)
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
                loop.call_soon_threadsafe(self.writer.arm_progress, r)

        task._report = report
        task._max_result = self.opts.max_result_bytes
        capture = self.opts.capture_logs
        if capture:
            task._capture = capture is True or msg.type in capture
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
            handler = self.runner.handler_for(r.msg.type)
            if r.msg.after is not None:  # a workflow task: its parents' results, from its record
                r.task._record = await self.runner.read_held(r.queue, r.id, self.ctx.broker.deps(r.queue, r.id),
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
                check_result(r.task.result, self.opts.max_result_bytes)
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

    def _time_out(self, r: Running) -> None:
        r.timed_out = True
        if r.aio is not None and not r.aio.done():
            r.aio.cancel()

    # -- 3. finishing: _run -> _finish (decide, log, hook) -> the writer (worker/writer.py) ---------------

    def _finish(self, r: Running, error: BaseException | None) -> None:
        """Decide and queue the write of a finished attempt. Whatever goes wrong while deciding
        (a result that cannot be stored, an exception whose text cannot be read), the task ends
        archived with the reason, never held with no outcome; if even that cannot be built, this
        server lets go of the task and the recoverer retries it when its lease expires."""
        assert r.task is not None
        try:
            plan = r.task._proc
            kind = Kind.RUN if r.run_of else Kind.PROCESS if isinstance(plan, process.Plan) else Kind.PLAIN
            result = plan.response if isinstance(plan, process.Plan) else r.task.result
            now_ms = self.ctx.clock.now_ms()
            msg = r.task.logged(now_ms)  # this attempt's lines (task.log, capture_logs), if any
            o = decide(msg, kind, error, now_ms, self.policy, result=result, task=r.task)
            self._log(r, o, error)
            if error is not None and o.will_retry is not None:
                self.runner.on_failure(r.task, error, o.will_retry)
            self.writer.put(r, o)
        except Exception as exc:  # noqa: BLE001 - logged with its traceback below
            try:
                o = unrecorded(r.msg, exc, self.ctx.clock.now_ms())
                log.error("task %s %s (queue %s): %s; archiving it", r.msg.type, r.id, r.queue, o.error, exc_info=exc)
                self.writer.put(r, o)
            except Exception:
                log.exception("task %s (queue %s): could not archive it either; letting its lease expire",
                              r.id, r.queue)
                self.held.pop((r.queue, r.id), None)

    def _log(self, r: Running, o: Outcome, error: BaseException | None) -> None:
        """One line for the attempt: its outcome, how long it took, and a failure's error (with
        its traceback, unless it says nothing: no handler, a timeout, SkipRetry)."""
        took = asyncio.get_running_loop().time() - r.started
        if error is None:
            level = logging.INFO if self.opts.log_success else logging.DEBUG  # ServerOptions.log_success
            if log.isEnabledFor(level):
                log.log(level, "task succeeded in %.3fs: %s", took, r.fields, extra={**r.extra, "duration": took})
            return
        extra = {**r.extra, "duration": took}
        if o.action in (Action.SNOOZE, Action.RUN_GIVEN_BACK):  # rate limited: a spent quota, not a failure
            log.info("task rate limited after %.3fs, runs again in %.1fs: %s", took, o.delay, r.fields,
                     extra={**extra, "retry_in": o.delay})
        else:
            if o.policy_error:
                log.error("the retry_delay policy failed for task %s (%s); using the default policy", r.id,
                          o.policy_error)
            what = f"run of targeted task {r.run_of} failed" if o.action is Action.RUN_FAILED else "task failed"
            then = f", archiving it{o.why}" if o.action is Action.ARCHIVE else \
                f", retrying in {o.delay:.1f}s" if o.action is Action.RETRY else ""
            extra.update(error=o.error, **({"retry_in": o.delay} if o.action is Action.RETRY else {}))
            log.warning("%s after %.3fs%s: %s error=%s", what, took, then, r.fields, o.error,
                        exc_info=None if quiet(error) else error, extra=extra)

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

    async def set_concurrency(self, concurrency: int) -> None:
        """Run up to ``concurrency`` handlers at once from now on (``asynqpy server scale``): a
        larger number is fetched for at once; a smaller one takes effect as running tasks finish
        (none is stopped). Returns once it holds: an idle wait whose dequeue was sent for more
        tasks than the new number leaves free (``worker/wake.py``: the dequeue rides with the
        wait, built before it) is ended as for ``quiet`` (its dequeue completes now, before this
        returns) and the fetcher starts again with the new number. The threads for plain ``def``
        handlers follow (twice the number), unless ``sync_threads`` was set."""
        async with self._fetch_lock:
            self.concurrency = concurrency
            if self.opts.sync_threads is None and isinstance(self._pool, DaemonThreadPool):
                self._pool.resize(2 * concurrency)
            self._slot_freed.set()  # a fetcher waiting for a free slot looks again
            while self._in_dequeue:  # a dequeue in flight was sent for the old number: it ends before this returns
                await asyncio.sleep(0.001)  # (its write may reach Redis after the acknowledgement's next enqueue)
            fetcher = self._fetcher
            if fetcher is None or not self._in_wait or self._riding <= concurrency - len(self.executing):
                return
            self._fetcher = None
            self._restart = True
            try:
                await self._stop_fetcher(fetcher, close=False)
            finally:
                self._restart = False
            if self._running and not self.quiet and not self.ctx.stopping.is_set():
                self._fetcher = asyncio.create_task(self._fetch_loop(), name="asynqpy-fetcher")

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
        """Stop fetching without losing a wake token or a dequeue in flight: a dequeue, a poll of
        the wake lists and a token's hand back are let finish, an idle wait is ended from outside
        (``CLIENT UNBLOCK``, or a push to its stop list), anything else is cancelled.

        An idle wait is never cancelled where it can be ended: a BLPOP whose read is cancelled
        goes on in the server until it sees the connection closed (fakeredis: until its timeout),
        and a token it pops meanwhile (a task enqueued just after) is lost with its reply: the
        queue then waits for the scan (:meth:`QueueOrder.scan`), seconds to minutes."""
        pushed = False
        while not fetcher.done():
            if self._in_wait and self._waiter is not None:
                try:
                    await self._waiter.unblock()
                except REDIS_ERRORS as exc:
                    log.warning("could not unblock the idle wait: %s", exc)
                    fetcher.cancel()
            elif self._in_wait and self._stop_key is not None:
                if not pushed:
                    pushed = True
                    try:
                        await self.ctx.redis.execute_command("LPUSH", self._stop_key, "1")
                        await self.ctx.redis.execute_command("EXPIRE", self._stop_key, 60)
                    except REDIS_ERRORS as exc:
                        log.warning("could not end the idle wait: %s", exc)
                        fetcher.cancel()
            elif not self._in_dequeue and not self._in_call:
                fetcher.cancel()
            await asyncio.wait([fetcher], timeout=0.05)
        if pushed and self._stop_key is not None:  # (left if the wait ended otherwise first)
            try:
                await self.ctx.redis.execute_command("DEL", self._stop_key)
            except REDIS_ERRORS as exc:
                log.warning("could not clear the idle wait's stop list: %s", exc)
        if close and self._waiter is not None:
            await self._waiter.close()
