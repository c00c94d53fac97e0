"""Processor: runs the tasks its fetcher (``worker/fetcher.py``) takes within the concurrency limit,
decides each attempt's outcome and hands it to the writer. On shutdown it waits for running
handlers, then requeues what is left. A task's path from dequeue to done reads top-down here:

1. fetching: :meth:`Processor.run` starts the :class:`~asynqpy.worker.fetcher.Fetcher`, which takes
   up to ``fetch_batch`` tasks with one ``dequeue`` script call (blocking on the queues' wake lists
   when idle) and hands each to :meth:`Processor.start`;
2. running: ``start`` checks the message (signature, decoding), computes the deadline and starts
   ``_run``, an asyncio task that awaits the handler chain (``_call_handler``; ``worker/runner.py``:
   middleware, then the handler, in the thread pool, a sandbox process, or as a durable process's
   input);
3. finishing: ``_finish`` decides the outcome with :func:`asynqpy.core.handlers.outcome.decide` (done,
   complete, commit, snooze, retry with its delay, archive, or a targeted run's end), logs it,
   starts the ``on_failure`` hook and hands it to the writer (``worker/writer.py``), which writes
   the outcomes of tasks that finish together in one pipeline and lets go of each task (``held``).

Elsewhere: the heartbeat renews the leases of ``held`` tasks and calls :meth:`Processor.lose` for
a lease it lost (so does the canceller, for a cancel notice)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any

from ..core.handlers.mux import ServeMux
from ..core.handlers.outcome import Action, Kind, Outcome, Policy, check_result, decide, quiet, refused, unrecorded
from ..core.model.errors import (
    BlobNotFoundError,
    EncryptionError,
    MalformedMessageError,
    SignatureError,
    TaskTimeoutError,
)
from ..core.model.task import Task, ms_to_datetime, set_current
from ..core.offload import refs
from ..core.processes import model as process
from ..core.security import encryption as enc
from ..core.security.keyplans import load_plan
from ..core.security.signing import run_message
from ..core.spine import tracing
from ..redisio.executor import arun_plan
from .context import Context, Running
from .deadlines import Deadlines
from .fetcher import Fetcher
from .runner import Runner
from .settings import ServerOptions
from .threadpool import DaemonThreadPool
from .writer import Writer

log = logging.getLogger("asynqpy.processor")


def _when(ms: int) -> str:
    return f"{ms_to_datetime(ms):%Y-%m-%d %H:%M:%S} UTC"


def _overran(r: Running) -> TaskTimeoutError:
    """The error of a handler cancelled at its deadline, or at its timeout."""
    if r.msg.deadline_ms and r.msg.deadline_ms == r.deadline_ms:
        return TaskTimeoutError(f"the handler ran past the task's deadline ({_when(r.msg.deadline_ms)})")
    return TaskTimeoutError(f"the handler ran past the task's timeout ({r.timeout_ms / 1000:g}s)")


class Processor:
    """The fetch/run/finish engine of a server."""

    def __init__(self, ctx: Context, options: ServerOptions, mux: ServeMux, pool: Executor) -> None:
        self.ctx = ctx
        self.opts = options
        self.name = options.worker_name
        self.held: dict[tuple[str, str], Running] = {}
        self.executing: set[Running] = set()
        self.deadlines = Deadlines(self._time_out)
        self.quiet = False  # asynqpy server quiet: no new task is taken (worker/control.py)
        self.concurrency = options.concurrency  # handlers at once (asynqpy server scale: set_concurrency)
        self._pool = pool
        self.runner = Runner(ctx, options, mux, pool, self)
        self.writer = Writer(ctx, options, self.held, self.executing)
        self.policy = Policy(options.retry_delay, options.unknown_type)
        self.dequeued: Callable[[str], None] | None = None  # told each queue this server took tasks of
        self.pages = self.runner.pages  # the process reads each dequeue makes (a count; -1: no process type)
        self.fetcher = Fetcher(ctx, options, self)
        self.writer.hold = lambda: self.fetcher.refill  # the writes ride with the fetcher's next dequeue
        self._slot_freed = self.fetcher.slot_freed
        self._fetch_lock = asyncio.Lock()  # one start or stop of the fetcher at a time
        self._running = False  # run() started the fetcher (serve() restarts it)

    def _fetch_again(self) -> None:
        """Start the fetcher again after a halt, unless it is not to fetch now."""
        if self._running and not self.quiet and not self.ctx.stopping.is_set():
            self.fetcher.start()

    async def serve(self, queues: Mapping[str, int]) -> None:
        """Fetch from ``queues`` from now on (the server's queues changed: a pattern matched a new
        queue, or a queue it had matched was dropped). The fetcher is stopped as for ``quiet``
        (a dequeue in flight completes, an idle wait is unblocked) and started again at once over
        the new queues: a new queue's wake token, left by its first enqueue, is taken by the next
        wait. The running tasks are not touched."""
        async with self._fetch_lock:
            await self.fetcher.halt()
            self.fetcher.serve(queues)
            self._fetch_again()

    async def run(self) -> None:
        """Process tasks until the server is asked to stop, then shut down gracefully."""
        writer = asyncio.create_task(self.writer.run(), name="asynqpy-writer")
        async with self._fetch_lock:
            self._running = True
            if not self.quiet:
                self.fetcher.start()
        await self.ctx.stopping.wait()
        self._slot_freed.set()
        async with self._fetch_lock:
            await self.fetcher.stop()
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

    # -- 2. running: the fetcher -> start (one asyncio task per task) -> _run (the handler, under its deadline) ---

    def start(self, queue: str, id: str, raw: bytes, token: str, now_ms: int, lease_until: float,
              page: tuple[str, list[Any]] | None = None) -> None:
        """Start a task the fetcher took (leased until ``lease_until``, loop time): its handler runs
        in an asyncio task of its own (``_run``); a message that cannot be read is archived unrun.
        ``page``: a process input's process, read by its dequeue (process id, proc_read's reply)."""
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
        task = Task(msg.type, _msg=msg, id=id, queue=queue, _deadline_ms=deadline_ms)
        r = Running(queue, id, token, msg, task, lease_until, started_ms=now_ms, deadline_ms=deadline_ms,
                    timeout_ms=timeout_ms, started=asyncio.get_running_loop().time(), run_of=run_of, page=page)
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
        """A task's asyncio task: the handler chain, its slot freed when it ends, then the outcome
        (``_finish``); nothing is written for a task lost or requeued meanwhile."""
        assert r.task is not None
        error: BaseException | None = None
        if log.isEnabledFor(logging.DEBUG):
            log.debug("task started: %s", r.fields, extra=r.extra)
        tracer = tracing.current
        span = tracer.process(r.queue, r.id, r.msg) if tracer is not None else None
        try:
            await self._call_handler(r, remaining)
        except asyncio.CancelledError:
            if r.lost or r.requeued:
                pass
            elif not r.timed_out:
                raise
            else:
                error = _overran(r)
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
        except Exception as exc:  # noqa: BLE001 - any handler failure is a task failure
            error = exc
        finally:
            self._ended(r, error, tracer, span)
        if r.lost or r.requeued:
            return
        self._finish(r, error)

    async def _call_handler(self, r: Running, remaining: float | None) -> None:
        """Await the handler chain (inside the task's own asyncio task: no wait_for, no extra task,
        no extra loop turn) under a timer that cancels it at the deadline; its return value is the
        result, unless the handler set one with ``write_result``."""
        assert r.task is not None
        await self._payload(r)
        if remaining is not None and remaining <= 0:
            raise TaskTimeoutError(f"the task's deadline ({_when(r.msg.deadline_ms)}) passed before it started")
        handler = self.runner.handler_for(r.msg.type)
        if r.msg.after is not None:  # a workflow task: its parents' results, from its record
            r.task._record = await self.runner.read_held(r.queue, r.id, self.ctx.broker.deps(r.queue, r.id),
                                                         "reading the task's parents' results")
            if self.ctx.broker.ring is not None:
                r.task._record = await self._open_parents(r.task._record)
        loop = asyncio.get_running_loop()
        if loop.time() >= r.lease_until:  # a busy loop read the dequeue's reply late: another may run it now
            self._let_go(r, "its lease ran out before its handler started (the event loop was busy)")
            return
        set_current(r.task)  # current_task() in the handler (this asyncio task's own context)
        self.deadlines.arm(r, remaining)  # (its time limit: worker/deadlines.py)
        try:
            returned = await handler(r.task)
        finally:
            self.deadlines.disarm(r)
        if r.timed_out:  # the handler swallowed the cancellation
            raise asyncio.CancelledError
        if returned is not None and not r.task.has_result:
            r.task.result = returned
        if r.task.result is not None:
            check_result(r.task.result, self.opts.max_result_bytes)

    async def _payload(self, r: Running) -> None:
        """The task's payload as its handler reads it: an offloaded one read from its blob first,
        then what it holds decrypted (docs/offload.md: the client sealed, then offloaded)."""
        assert r.task is not None
        if refs.is_ref(r.msg.payload):
            await self._fetch(r)
        ring, msg = self.ctx.broker.ring, r.task._msg
        if ring is not None and (p := enc.open_plain_payload(ring, r.queue, msg)) is not enc.GENERAL:
            r.opened, r.task._payload = msg, p  # (the common task, at once: no tenant key to load; the message as is)
        elif ring is not None or enc.sealed_message(msg):
            await self._open(r)

    async def _fetch(self, r: Running) -> None:
        """Read an offloaded payload from its blob for the handler (docs/offload.md); ``r.msg``
        keeps the reference, and so does every message the outcome stores (``_finish``). A blob
        that is missing raises BlobNotFoundError: archived at once with the reason, never retried
        (core/handlers/outcome.py); a store that fails otherwise is an attempt's failure (retried)."""
        assert r.task is not None
        store = self.ctx.offload
        if store is None:
            raise BlobNotFoundError("the task's payload is offloaded and this worker has no blob store "
                                    "(Server(offload=...), docs/offload.md)")
        name = refs.ref_of(r.msg.payload)
        data = await asyncio.get_running_loop().run_in_executor(self._pool, store.get, name)
        try:
            value = refs.decode(data)
        except MalformedMessageError as exc:
            raise BlobNotFoundError(f"blob {name!r} does not hold a payload: {exc}") from None
        r.task._msg = r.task._msg.with_(payload=value)
        r.fetched = True

    async def _open(self, r: Running) -> None:
        """Decrypt the task's payload (read from its blob first when offloaded: ``_fetch``) and
        logs for its handler (``r.msg`` stays as stored; the
        outcome seals again what it rewrites: ``_finish``). A task this worker cannot open (no key
        ring, a missing key, a tampered ciphertext) raises EncryptionError: archived at once with
        the reason, never retried (core/handlers/outcome.py)."""
        assert r.task is not None
        ring, msg = self.ctx.broker.ring, r.task._msg  # (r.msg, its payload read from its blob: _fetch)
        if ring is None:
            raise EncryptionError("the task is encrypted and this worker has no key ring (encryption=KeyRing(...), "
                                  "--encryption-keys)")
        tenants = {(r.queue, t) for t in enc.message_tenants(msg)}
        if ring.needs_tenant_key(msg.tenant):
            tenants.add((r.queue, msg.tenant))
        if tenants:
            await arun_plan(self.ctx.exec, load_plan(ring, tenants, create=ring.needs_tenant_key(msg.tenant)))
        try:
            r.task._msg = r.opened = enc.open_message(ring, r.queue, msg)
        except MalformedMessageError as exc:
            raise EncryptionError(f"the task's encrypted values do not decode: {exc}") from None

    async def _open_parents(self, record: Any) -> Any:
        """A workflow task's record with its parents' encrypted results decrypted (each with its
        parent's queue's keys). A result that cannot be opened raises EncryptionError (archived)."""
        ring = self.ctx.broker.ring
        sealed = [p for p in record.parents if enc.is_sealed(p.result)]
        if not sealed:
            return record
        tenants = {(p.queue, t) for p in sealed if (t := enc.tenant_of_kid(enc.key_id(p.result))) is not None}
        if tenants:
            await arun_plan(self.ctx.exec, load_plan(ring, tenants))
        parents = [replace(p, result=ring.open(p.result, enc.RESULT, p.queue)) if enc.is_sealed(p.result) else p
                   for p in record.parents]
        return replace(record, parents=parents)

    def _ended(self, r: Running, error: BaseException | None, tracer: Any, span: Any) -> None:
        """A handler ended (or was stopped): its slot is free; its duration and trace recorded."""
        self.executing.discard(r)
        self._slot_freed.set()
        if self.ctx.metrics.enabled:
            self.ctx.metrics.ended(r.queue, r.msg.type, asyncio.get_running_loop().time() - r.started)
            if r.lost:
                self.ctx.metrics.outcome(r.queue, r.msg.type, "lease_lost")
        if span is not None and tracer is not None:
            outcome = "lease_lost" if r.lost else "requeued" if r.requeued else "failed" if error else "succeeded"
            tracer.processed(span, error, outcome)

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
            if r.fetched:  # stored with its reference, never the payload read from the blob
                msg = msg.with_(payload=r.msg.payload)
            if r.opened is not None:  # sealed again as stored: the payload's ciphertext (or reference) kept, logs and
                ring = self.ctx.broker.ring  # result sealed (the message as stored, where the handler changed none)
                msg = r.msg if msg is r.opened and not r.fetched else enc.seal_rewrite(ring, r.queue, msg, r.msg)
                if result is not None and not enc.is_sealed(result):  # (a process's response is sealed)
                    result = ring.seal(result, enc.RESULT, r.queue, msg.tenant)
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

    def _let_go(self, r: Running, why: str) -> None:
        """Give up a task before its handler starts (from inside its own asyncio task: nothing to
        cancel); nothing is written, the recoverer retries it when its lease has expired."""
        if self.held.get((r.queue, r.id)) is r:
            del self.held[(r.queue, r.id)]
        r.lost = True
        log.warning("let go of task %s (queue %s) unrun: %s", r.id, r.queue, why)

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
            # a dequeue in flight was sent for the old number: it ends before this returns
            # (its write may reach Redis after the acknowledgement's next enqueue)
            await self.fetcher.dequeue_ended()
            if self.fetcher.rides_past(concurrency - len(self.executing)):
                await self.fetcher.halt()
                self._fetch_again()

    async def set_quiet(self, quiet: bool) -> None:
        """Stop taking new tasks (``quiet``: the running ones go on and are written) or take
        them again; returns once it holds (a dequeue in flight is let finish first, so no task is
        taken after this returns)."""
        async with self._fetch_lock:
            self.quiet = quiet
            if quiet:
                await self.fetcher.stop(close=False)
            elif not self.fetcher.running and not self.ctx.stopping.is_set():
                self.fetcher.start()
