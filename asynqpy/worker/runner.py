"""Runner: how a task type's handler is called, apart from the processor's fetch-run-finish path.

:meth:`Runner.handler_for` builds (once per type) the chain the processor awaits: the mux's
middleware around the handler, itself wrapped by how it runs — an async handler as is, a plain one
in the thread pool (``_threaded``), a sandboxed one (``Sandboxed``, or every plain handler under
``ServerOptions.sandbox``) in the pool of child processes (``worker/sandbox.py``), and a durable
process type's inputs (``_process_chain``: read the process, run its processor, leave the plan of
its commit in ``task._proc``, which the processor's outcome commits). Also here: the reads a task
needs before its handler runs, waited out through a Redis outage while its lease lasts
(:meth:`read_held`), and the server's ``on_failure`` hook (:meth:`on_failure`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
from collections import OrderedDict
from concurrent.futures import Executor
from typing import Any

from ..core.durable import signed
from ..core.handlers.mux import AsyncHandler, Handler, ServeMux, not_found
from ..core.handlers.sandbox import Sandboxed, import_path
from ..core.model.errors import LeaseLostError, TaskNotFoundError
from ..core.model.task import Task
from ..core.processes import model as process
from ..core.security import encryption as enc
from ..core.security.keyplans import load_plan
from ..core.spine.broker import Call
from ..redisio.connection import REDIS_ERRORS
from ..redisio.executor import arun_plan
from .context import Context, Holder
from .sandbox import SandboxPool
from .settings import ServerOptions

log = logging.getLogger("asynqpy.processor")  # the processor's log: running handlers is part of its work


def is_async(fn: Any) -> bool:
    """Whether ``fn`` (a function, or an object whose ``__call__`` is) is a coroutine function."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004 - an object whose __call__ is a coroutine function


CONTINUE_S = 5.0
"""How long a durable run goes on in one input (step after step, each checkpointed) before its
input ends and a continuation takes its turn in the queue (as its tenant's task, if it has one)."""

HISTORY_CACHE = 2000
"""Processes whose latest events a worker keeps (their last read's page of history): a process's
next read returns only the events it lacks."""

TAIL = 4
"""The newest events of a process a dequeue reads with each process input it takes while this
worker finds the rest of the page held (:meth:`_Reads.pages`), instead of the whole window."""


_ProcRead = tuple[str, int, str, int, asyncio.Future[Any]]
"""A process read of a pipeline: its queue, history window, process id, newest event held, caller."""


class _Reads:
    """The reads tasks need before their handler runs (a process input's process, a workflow
    child's parents' results), sent together: those asked for in one turn of the event loop (the
    tasks of one dequeued batch start in the same turn) go in one pipeline, one round trip for
    the batch rather than one per task, and the processes of one queue (with one history window)
    in one ``proc_read`` call. Each read's reply, or the error it met, goes to its own caller (a
    connection error to every caller of the pipeline).

    A process's events never change once written (they are only deleted, from the oldest on, or
    with the process), so the events of a process's last read are kept (:data:`HISTORY_CACHE`
    processes, the least recently read dropped): its next read asks only for the events from the
    newest one held on, and that one, read again, must be the event held (else, a process removed
    and started again under the same id, the page is read whole).

    The dequeue reads each process input's process with it (``pages`` events: lua/includes/dq_procs).
    While most of those reads find the page's older events held (a worker that runs a process's
    inputs one after another: its last read is that process's previous one), the dequeue reads only
    the newest :data:`TAIL` and the page is made whole from the events held (the first one read must
    be the event held there); a process whose older events are not held is read again with
    ``proc_read`` from the newest one held (a round trip for that batch). Each dequeued read counts,
    whichever way it was read, whether a tail would have done (a moving share, :meth:`pages`)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._pending: list[tuple[Call[Any], asyncio.Future[Any]]] = []
        self._procs: dict[tuple[str, int], list[tuple[str, asyncio.Future[Any]]]] = {}
        self._flushes: set[asyncio.Task[None]] = set()
        self._held: OrderedDict[tuple[str, str], tuple[int, list[bytes]]] = OrderedDict()
        # (queue, process id) -> (id of the first event held, the events held from it on)
        self._tail_hits = 0.0  # the moving share of dequeued process reads a tail would have made whole
        self._tail = False  # the dequeue reads a tail (:data:`TAIL` events) rather than the whole window

    def pages(self, window: int) -> int:
        """How many of its process's last events a dequeue reads with each process input it takes
        (-1: none, a worker of no process type): ``window`` (the most its process types read), or
        :data:`TAIL` while a tail mostly did (on from a share of 0.9, off below 0.7)."""
        return TAIL if self._tail and window > TAIL else window

    def _count_tail(self, hit: bool) -> None:
        self._tail_hits += ((1.0 if hit else 0.0) - self._tail_hits) / 64
        self._tail = self._tail_hits >= 0.7 if self._tail else self._tail_hits >= 0.9

    def _completed(self, key: tuple[str, str], want: int, start: int, events: list[Any]) -> list[Any] | None:
        """A page of events read from ``start`` made whole from event ``want`` on with the events
        held (the first one read must be the one held there); None when they are not held."""
        got = self._held.get(key)
        if got is None or not events:
            return None
        first_held, held = got
        if not first_held <= want <= start <= first_held + len(held) - 1 or held[start - first_held] != events[0]:
            return None
        return [*held[want - first_held:start - first_held], *events]

    def _known(self, queue: str, pid: str) -> int:
        got = self._held.get((queue, pid))
        return got[0] + len(got[1]) - 1 if got is not None and got[1] else 0

    def _page(self, queue: str, pid: str, count: int, known: int,
              reply: Any) -> tuple[process.Record, process.History] | None | bool:
        """The process (its record, its page of history) from the reply of its read and the events
        held (None: no such process; False: the event held is not the one stored, read the page
        whole); the events kept for the next read."""
        key = (queue, pid)
        if not reply:
            self._held.pop(key, None)
            return None
        rec = reply[0] if isinstance(reply[0], process.Record) else process.parse_record(pid, reply[0])
        start, events = int(reply[1]), reply[2:]
        if known and start == known:  # read from the newest event held on
            got = self._held.get(key)
            if got is None or not events or events[0] != got[1][-1]:
                return False
            first_held, held = got
            start = max(rec.count - count + 1, rec.first, 1)
            if start < first_held:
                return False
            events = [*held[start - first_held:known - first_held], *events]
        if count and events and all(events):
            self._held[key] = (start, events)
            self._held.move_to_end(key)
            while len(self._held) > HISTORY_CACHE:
                self._held.popitem(last=False)
        else:
            self._held.pop(key, None)
        return rec, process.History(start, events)

    def _future(self) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        if not self._pending and not self._procs:  # the first of this turn: sent once the turn's tasks asked theirs
            t = loop.create_task(self._flush())
            self._flushes.add(t)
            t.add_done_callback(self._flushes.discard)
        return loop.create_future()

    def primed(self, queue: str, pid: str, count: int,
               reply: list[Any]) -> tuple[process.Record, process.History] | None | bool:
        """Process ``pid`` from the page its input's dequeue read (lua/includes/dq_procs: the
        record and its last ``count`` events, or its last :data:`TAIL` ones, made whole with the
        events held), as :meth:`process` returns it; False when the page is not whole (read it)."""
        if not reply:
            return self._page(queue, pid, count, 0, reply)
        rec = process.parse_record(pid, reply[0])
        want = max(rec.count - count + 1, rec.first, 1)  # the page's first event
        start, events, key = int(reply[1]), reply[2:], (queue, pid)
        if start < want:  # (the dequeue read the most events of the worker's process types)
            events, start = events[want - start:], want
        tail = max(want, rec.count - TAIL + 1)  # where a tail read starts: a page that short is whole from it alone
        whole = self._completed(key, want, tail, events[tail - start:]) if want < tail and tail >= start else None
        self._count_tail(want == tail or whole is not None)
        if start > want:  # a tail: the events before it come from those held
            if whole is None:
                return False
            events, start = whole, want
        got = self._page(queue, pid, count, 0, [rec, start, *events])
        assert got is not False and got is not True  # (only a read from an event held can find it changed)
        return got

    async def run(self, call: Call[Any]) -> Any:
        fut = self._future()
        self._pending.append((call, fut))
        return await fut

    async def process(self, queue: str, pid: str, count: int) -> tuple[process.Record, process.History] | None:
        """Process ``pid`` (its record and its last ``count`` events), None if there is none."""
        fut = self._future()
        self._procs.setdefault((queue, count), []).append((pid, fut))
        got: tuple[process.Record, process.History] | None = await fut
        return got

    async def _flush(self) -> None:
        """Send the reads asked for in this turn in one pipeline; each reply to its caller."""
        batch, self._pending = self._pending, []
        procs, self._procs = self._procs, {}
        calls = [c for c, _ in batch]
        futs: list[asyncio.Future[Any] | list[_ProcRead]] = [f for _, f in batch]
        for (queue, count), reads in procs.items():
            knowns = [self._known(queue, pid) if count else 0 for pid, _ in reads]
            calls.append(self.ctx.broker.proc_read_many(queue, [pid for pid, _ in reads], 0, count, knowns))
            futs.append([(queue, count, pid, k, f) for (pid, f), k in zip(reads, knowns)])
        try:
            replies = await self.ctx.exec.run_many(calls)
        except BaseException as exc:
            _fail(futs, exc)
            if not isinstance(exc, Exception):
                raise
            return
        again: list[tuple[str, int, str, asyncio.Future[Any]]] = []
        for g, r in zip(futs, replies):
            if not isinstance(g, list):
                if not g.done():
                    g.set_exception(r) if isinstance(r, Exception) else g.set_result(r)
            else:
                again += self._pages(g, r)
        for queue, count, pid, f in again:  # (a process started again under the same id: rare)
            await self._read_whole(queue, count, pid, f)

    def _pages(self, reads: list[_ProcRead], reply: Any) -> list[tuple[str, int, str, asyncio.Future[Any]]]:
        """The processes of one ``proc_read`` call to their callers; returns those whose page is
        to be read whole (the event held is not the one stored)."""
        again: list[tuple[str, int, str, asyncio.Future[Any]]] = []
        for i, (queue, count, pid, known, f) in enumerate(reads):
            if f.done():
                continue
            if isinstance(reply, Exception):
                f.set_exception(reply)
                continue
            page = self._page(queue, pid, count, known, reply[i])
            if page is False:
                self._held.pop((queue, pid), None)
                again.append((queue, count, pid, f))
            else:
                f.set_result(page)
        return again

    async def _read_whole(self, queue: str, count: int, pid: str, f: asyncio.Future[Any]) -> None:
        """Read a process's page whole (nothing held), for its caller."""
        try:
            page = self._page(queue, pid, count, 0, await self.ctx.exec.run(self.ctx.broker.proc_read(queue, pid, 0,
                                                                                                     count)))
        except Exception as exc:  # noqa: BLE001 - its caller meets it
            if not f.done():
                f.set_exception(exc)
            return
        if not f.done():
            f.set_result(page)


def _fail(futs: list[asyncio.Future[Any] | list[_ProcRead]], exc: BaseException) -> None:
    """Every caller of a pipeline that failed meets its error (a cancellation: cancelled)."""
    for f in (f for g in futs for f in ([e[4] for e in g] if isinstance(g, list) else [g])):
        if not f.done():
            f.set_exception(exc) if isinstance(exc, Exception) else f.cancel()


def _checkpointed(task: Task, r: Any, held: process.Record, count: int, raw: Any, history: Any,
                  encoded: list[bytes]) -> None:
    """A written checkpoint: the input holds the process's new record (``held`` as the checkpoint
    left it, :func:`~asynqpy.core.processes.model.checkpointed`), and the events it wrote
    (``encoded``) go to the stream with the input's commit (durable_emit writes them only if the
    commit happened)."""
    task._proc = (process.checkpointed(held, count, raw), history)
    r.checkpointed = (r.checkpointed or []) + encoded


class _Checkpoints:
    """The checkpoints of a worker's running durable inputs, sent together: those asked for in one
    turn of the event loop go in one ``proc_step`` call per queue (as the writer batches commits)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._queued: dict[str, list[tuple[Any, asyncio.Future[Any]]]] = {}
        self._sending: set[asyncio.Task[None]] = set()

    def send(self, queue: str, item: Any) -> asyncio.Future[Any]:
        """Queue one checkpoint (``Broker.proc_step``'s item); its future gets the item's reply."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._flush)
        self._queued.setdefault(queue, []).append((item, fut))
        return fut

    def _flush(self) -> None:
        queued, self._queued = self._queued, {}
        for queue, items in queued.items():
            t = asyncio.create_task(self._send(queue, items), name=f"asynqpy-checkpoints-{queue}")
            self._sending.add(t)
            t.add_done_callback(self._sending.discard)

    async def _send(self, queue: str, items: list[tuple[Any, asyncio.Future[Any]]]) -> None:
        try:
            replies = await self.ctx.exec.run(self.ctx.broker.proc_step(queue, [i for i, _ in items]))
        except BaseException as exc:  # noqa: BLE001 - each waiting checkpoint gets it
            for _, f in items:
                if not f.done():
                    f.set_exception(exc if isinstance(exc, Exception) else ConnectionError(str(exc)))
            return
        for (_, f), reply in zip(items, replies):
            if not f.done():
                if isinstance(reply, Exception):
                    f.set_exception(reply)
                else:
                    f.set_result(reply)


class Runner:
    """The handler chains of a server's task types. ``holder``: the processor (its held tasks,
    and :meth:`~asynqpy.worker.context.Holder.lose` for a task whose read outlasts its lease)."""

    def __init__(self, ctx: Context, options: ServerOptions, mux: ServeMux, pool: Executor, holder: Holder) -> None:
        self.ctx = ctx
        self.opts = options
        self.mux = mux
        self.pool = pool
        self.holder = holder
        self._chains: dict[str, AsyncHandler] = {}
        self._sandbox: SandboxPool | None = None  # the child processes of sandboxed handlers (made when used)
        self._hooks: set[asyncio.Task[None]] = set()  # on_failure hooks running
        self._reads = _Reads(ctx)  # the reads before handlers, one pipeline per turn of the loop
        self._steps = _Checkpoints(ctx)  # the durable runs' checkpoints, one script call per queue per turn
        handlers = [mux.match(p) for p in mux.patterns]
        # the events of a process each dequeue reads with a process input it takes (the most its
        # process types read; -1: no process type, no reads): the input then needs no read of its own
        self.window = max((h.history for h in handlers if isinstance(h, process.ProcessHandler)), default=-1)
        if options.sandbox:  # every plain handler runs sandboxed: each must be importable by a child
            for pattern in mux.patterns:
                fn = mux.match(pattern)
                if fn is not None and not isinstance(fn, (Sandboxed, process.ProcessHandler)) and not is_async(fn):
                    import_path(fn)

    def pages(self) -> int:
        """The events of its process each dequeue reads with a process input it takes (-1: none):
        the most its process types read, or a tail of them (:meth:`_Reads.pages`)."""
        return self._reads.pages(self.window)

    async def close(self) -> None:
        """Stop the sandbox's child processes, if any were started."""
        if self._sandbox is not None:
            await self._sandbox.close()

    def handler_for(self, task_type: str) -> AsyncHandler:
        """The chain that runs a task of ``task_type`` (built on first use)."""
        chain = self._chains.get(task_type)
        if chain is None:
            fn = self.mux.match(task_type) or not_found
            if isinstance(fn, process.ProcessHandler):
                chain = self._process_chain(fn)
            elif isinstance(fn, Sandboxed):
                chain = self._sandboxed(fn.path)
            elif self.opts.sandbox and fn is not not_found and not is_async(fn):
                chain = self._sandboxed(import_path(fn))
            else:
                chain = fn if is_async(fn) else self._threaded(fn)
            for mw in reversed(self.mux.middleware):
                chain = mw(chain)
            self._chains[task_type] = chain
        return chain

    def _threaded(self, fn: Handler) -> AsyncHandler:
        async def call(task: Task) -> Any:
            ctx = contextvars.copy_context()
            return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(ctx.run, fn, task))

        return call

    def _sandboxed(self, path: str) -> AsyncHandler:
        """A handler run in the server's pool of child processes (worker/sandbox.py)."""
        async def run(task: Task) -> Any:
            if self._sandbox is None:
                o = self.opts
                self._sandbox = SandboxPool(o.sandbox_processes, o.sandbox_max_tasks, o.sandbox_max_memory_mb,
                                            o.max_result_bytes)
            r = self.holder.held.get((task.queue, task.id))
            return await self._sandbox.run(path, task, r.deadline_ms if r is not None else 0)

        return run

    def _process_chain(self, h: process.ProcessHandler) -> AsyncHandler:
        """A process type's inputs: read the process, run the processor (a plain one in the thread
        pool), leave the plan of its commit in ``task._proc`` (written as the outcome's commit)."""
        async def run(task: Task) -> None:
            parsed = process.parse_input(task.type, task.message.key, task.payload)
            loop = asyncio.get_running_loop()
            started = loop.time()
            if parsed is not None:
                task._proc = await self._process_of(task, parsed[0], h)
            plan, proc, inp = h.prepare(task, parsed)
            if plan is not None:
                task._proc = plan
                return
            assert proc is not None
            ring = self.ctx.broker.ring
            if ring is not None:  # its state and history decrypted (docs/encryption.md)
                tenants = enc.process_tenants(task.queue, proc)
                if tenants:
                    await arun_plan(self.ctx.exec, load_plan(ring, tenants))
                proc = enc.open_process(ring, task.queue, proc)
            proc = self._verified(task.queue, h, proc)
            if self.ctx.metrics.enabled:
                self.ctx.metrics.process_phase(h.type, "read", loop.time() - started)
            started = loop.time()
            now = process.NOW.set(self.ctx.clock.now_ms)  # (the clock its timers fire by: Redis's)
            try:
                if h.is_async:
                    saved = process.CHECKPOINT.set(self._checkpoint(task, parsed, h) if h.checkpoints else None)
                    try:
                        step = await h.fn(proc, inp)  # type: ignore[misc]
                    finally:
                        process.CHECKPOINT.reset(saved)
                else:
                    ctx = contextvars.copy_context()
                    step = await loop.run_in_executor(self.pool, functools.partial(ctx.run, h.fn, proc, inp))
            finally:
                process.NOW.reset(now)
            if self.ctx.metrics.enabled:
                self.ctx.metrics.process_phase(h.type, "processing", loop.time() - started)
            step = self._tagged(task, h, step)
            if ring is not None:
                step = enc.seal_step(ring, task.queue, task.tenant, step)
            h.finish(task, step, self.ctx.clock.now_ms(), parsed)

        return run

    async def _process_of(self, task: Task, pid: str, h: process.ProcessHandler) -> Any:
        """The process of input ``task``: as its dequeue read it (made whole from the events held,
        :meth:`_Reads.primed`), else read now."""
        r = self.holder.held.get((task.queue, task.id))
        page = r.page if r is not None else None
        if r is not None:
            r.page = None
        got = self._reads.primed(task.queue, pid, h.history, page[1]) if page is not None and page[0] == pid else False
        return got if got is not False else await self.read_held(task.queue, task.id, (pid, h.history),
                                                                 f"reading process {pid}")

    def _verified(self, queue: str, h: process.ProcessHandler, proc: Any) -> Any:
        """A durable run's process with its history verified and its events' tags taken off, when
        the server has signing keys (core/durable/signed.py: ForgedHistoryError stops the run)."""
        signer = self.ctx.broker.signer
        return signed.open_history(signer, queue, proc) if signer is not None and h.checkpoints else proc

    def _tagged(self, task: Task, h: process.ProcessHandler, step: Any) -> Any:
        """A durable run's step with its events tagged (numbered after the record as its
        checkpoints left it), when the server has signing keys."""
        signer, got = self.ctx.broker.signer, task._proc
        if signer is None or not h.checkpoints or got is None or got[0] is None:
            return step
        return signed.seal_step(signer, task.queue, got[0].id, got[0].count, step)

    def _tagged_events(self, queue: str, pid: str, after: int, events: Any) -> Any:
        """A checkpoint's events tagged (numbered after event ``after``), when the server has keys."""
        signer = self.ctx.broker.signer
        return events if signer is None else signed.seal_events(signer, queue, pid, after, events)

    def _checkpoint(self, task: Task, parsed: tuple[str, str, Any] | None, h: process.ProcessHandler) \
            -> process.Checkpoint:
        """The :data:`~asynqpy.core.processes.model.CHECKPOINT` of an input of a processor that
        writes part of its step early (a durable run, which goes on in the same input after each
        step): each call appends the events given (lua/proc_step.lua, one round trip) and says
        whether the input should end now, because other inputs of the process wait behind it or it
        ran :data:`CONTINUE_S` seconds. A checkpoint refused (the lease lost, the process changed)
        lets go of the input: nothing more is written, and it runs again after its lease."""
        assert parsed is not None
        pid, kind, _ = parsed
        queue, iid, loop = task.queue, task.id, asyncio.get_running_loop()
        ends = loop.time() + CONTINUE_S

        async def checkpoint(events: Any) -> bool:
            r = self.holder.held.get((queue, iid))
            if r is None or r.lost or task._proc is None:
                raise LeaseLostError(f"input {iid} of process {pid} is no longer held")
            rec, history = task._proc
            # tagged (signing: as the commit's, _tagged) and sealed (the ring: as the commit's, seal_step);
            # the stream gets them so too, with the input's commit (writer.py)
            events = self._sealed(self._tagged_events(queue, pid, rec.count, events), queue, task.tenant)
            count, packed, encoded = process.checkpoint_args(rec, kind, events, iid.encode(errors="surrogateescape"))
            t0 = loop.time()
            sent = self._steps.send(queue, (iid, r.token, pid, rec, count, packed, task.message.key))
            try:
                raw, waiting = await asyncio.shield(sent)
            except asyncio.CancelledError:
                # cancelled (a durable cancel notice, a timeout) while the checkpoint was in flight: it
                # may have been written, changing the record the input's commit is checked against,
                # so its reply is awaited and kept (else that commit is refused as stale and the
                # input waits for its lease to expire)
                with contextlib.suppress(Exception):  # refused or failed: the record did not change
                    _checkpointed(task, r, rec, count, (await sent)[0], history, encoded)
                raise
            except (LeaseLostError, TaskNotFoundError) as exc:
                self.holder.lose(r, f"its checkpoint was refused ({exc})")
                await asyncio.sleep(0)  # the cancellation lose() requested lands here
                raise
            _checkpointed(task, r, rec, count, raw, history, encoded)
            if self.ctx.metrics.enabled:
                self.ctx.metrics.process_phase(h.type, "checkpoint", loop.time() - t0)
            late = r.deadline_ms and self.ctx.clock.now_ms() > r.deadline_ms - 1000 * CONTINUE_S
            return waiting > 0 or loop.time() >= ends or bool(late)

        return checkpoint

    def _sealed(self, events: list[Any], queue: str, tenant: str | None) -> list[Any]:
        """A checkpoint's events sealed with the key ring, as the input's commit seals its own
        (enc.seal_step); as given without a ring."""
        ring = self.ctx.broker.ring
        if ring is None:
            return events
        return [ring.seal(e, enc.HISTORY, queue, tenant) for e in events]

    async def read_held(self, queue: str, id: str, call: Call[Any] | tuple[str, int], what: str) -> Any:
        """A read a task needs before its handler runs (its process, its parents' results): a
        Redis outage is not the task's failure, so it is waited out (with backoff) while the
        task's lease lasts; once the lease could not be renewed in time, this server lets go of
        the task (``holder.lose``: it is cancelled and nothing is written) and the recoverer runs
        it again when the lease expires in Redis, as for any task held through an outage. ``call``:
        the read, or (process id, events) for the task's process (read with the batch's others)."""
        loop = asyncio.get_running_loop()
        delay = 0.05
        while True:
            try:
                if isinstance(call, tuple):
                    return await self._reads.process(queue, *call)
                return await self._reads.run(call)
            except REDIS_ERRORS as exc:
                r = self.holder.held.get((queue, id))
                if r is None or r.lost:
                    raise
                if loop.time() >= r.lease_until:
                    self.holder.lose(r, f"Redis was unreachable while {what} until its lease ran out")
                    await asyncio.sleep(0)  # the cancellation lose() requested lands here
                    raise  # (not reached unless the task was finished meanwhile)
                self.ctx.health.failed(f"{what} (retried in {delay:.2f}s)", exc)
                await asyncio.sleep(min(delay, max(0.0, r.lease_until - loop.time())))
                delay = min(delay * 2, 2.0)

    def on_failure(self, task: Task | None, error: BaseException, will_retry: bool) -> None:
        """Start the server's ``on_failure`` hook, if any, for a failed attempt (in the background:
        the outcome's write does not wait for it). What the hook raises is logged."""
        hook = self.opts.on_failure
        if hook is None or task is None:
            return

        async def call() -> None:
            try:
                if is_async(hook):
                    await hook(task, error, will_retry)
                else:
                    await asyncio.get_running_loop().run_in_executor(self.pool, hook, task, error, will_retry)
            except Exception:
                log.exception("the on_failure hook failed for task %s (queue %s)", task.id, task.queue)

        t = asyncio.create_task(call(), name=f"asynqpy-on-failure-{task.id}")
        self._hooks.add(t)
        t.add_done_callback(self._hooks.discard)
