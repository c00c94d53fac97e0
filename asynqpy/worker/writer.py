"""Writer: the server's writes of attempts' outcomes and progress, in their own loop (as asynq's
syncer).

The processor hands each decided :class:`~asynqpy.core.handlers.outcome.Outcome` to :meth:`Writer.put`,
which turns it into its script call (done, complete, proc_commit, snooze, retry, archive or
run_end) and queues it. :meth:`Writer.run` sends the calls queued meanwhile in one pipeline
(:meth:`_send`: the plain successes of a queue go as one batched ``done`` call, at most
:data:`MAX_ACK` tasks each) and lets go of each task (``held``) once its outcome is written.
Batching adds no wait: what finishes while a write is in flight goes in the next one. A busy
worker's writes ride with its next dequeue (:meth:`take`, :meth:`write_with`: one pipeline, and the
acknowledgement of the dequeued queue and the dequeue in one ``done_dequeue`` call): while the
fetcher is about to dequeue (``hold``), the loop leaves the writes to it. A write
that meets a Redis outage is retried, with backoff, while the task's lease lasts (then the
recoverer finishes it); one refused because the lease was lost (another worker holds the task
now) or because the task is gone is logged and dropped. Late waiters named by a finishing
script are told the outcome afterwards (:meth:`_reply`).

Also here: a running task's progress writes (at most one every :data:`PROGRESS_EVERY` seconds,
the latest value wins) and, at shutdown, the requeue of the tasks still running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..core.durable import events as durable_events
from ..core.handlers.outcome import Action, Outcome
from ..core.limits.plans import SIGNALS_FREED_SLOT
from ..core.model import codec
from ..core.model.errors import AsynqpyError, LeaseLostError, TaskNotFoundError
from ..core.model.options import new_task_id
from ..core.processes import model as process
from ..core.results.plans import pack_outcome, pack_progress, wake_calls
from ..core.spine.broker import Call, Commit, Dequeued, Done, Finished
from ..redisio.connection import REDIS_ERRORS, RETRYABLE
from .context import Context, Running
from .heap import HeapFreeze
from .settings import ServerOptions

log = logging.getLogger("asynqpy.processor")  # the processor's log: its writes are part of its work

MAX_ACK = 256
"""Most tasks one batched acknowledgement (the done script) carries."""
MAX_COMMIT = 64
"""Most process inputs one batched commit (the proc_commit script) carries (each writes its
process's record and events: a batch's script time stays well under a millisecond)."""
PROGRESS_EVERY = 0.2
"""Seconds between two progress writes of one task (task.progress in a tight loop writes at
most this often; the latest value wins)."""


@dataclass
class _Write:
    running: Running
    call: Call[Any] | Done | Commit  # a Done (a Commit) is written with the others of its queue, in one call
    what: str
    since: float = 0.0  # (a process input's commit) when its outcome was decided, for its metric
    attempts: int = 0


_Item = TypeVar("_Item")

Ride = tuple[str, Callable[[Sequence[Done]], Call[tuple[list[Any], Dequeued]]], Call[Dequeued]]
"""A dequeue riding with writes (:meth:`Writer.write_with`): its queue, the call acknowledging
that queue's successes with it (``Broker.done_dequeue``), and the dequeue alone (no success of
that queue among the writes)."""


def _batched(by_queue: dict[str, list[tuple[_Write, _Item]]], size: int,
             call: Callable[[str, list[_Item]], Call[Any]], calls: list[Call[Any]],
             groups: list[list[_Write] | None]) -> None:
    """One batched call (``call``) per queue and ``size`` items, appended to ``calls``; the writes
    it carries to ``groups``."""
    for queue, items in by_queue.items():
        for i in range(0, len(items), size):
            chunk = items[i:i + size]
            calls.append(call(queue, [x for _, x in chunk]))
            groups.append([w for w, _ in chunk])


DURABLE_INPUTS = process.TYPE_PREFIX + durable_events.TYPE_PREFIX
"""The task type prefix of durable runs' inputs."""


def _durable_events(w: _Write) -> list[Any]:
    """The ``durable_emit`` items (core/durable/events.py) of what a durable run's input recorded:
    its stream entries, written after its commit in the same pipeline, only if it committed; []
    for other inputs."""
    r = w.running
    plan = r.task._proc if r.task is not None else None
    if not isinstance(plan, process.Plan):
        return []
    events = (r.checkpointed or []) + plan.events  # (what its checkpoints wrote first: lua/proc_step.lua)
    if not events:
        return []
    return durable_events.emit_items(r.id, r.msg.type[len(process.TYPE_PREFIX):], plan.pid, events)


def _durable_metrics(metrics: Any, r: Running) -> None:
    """The durations of the step attempts a durable run's input ran (``asynqpy_durable_step_seconds``)."""
    plan = r.task._proc if r.task is not None else None
    function = r.msg.type[len(process.TYPE_PREFIX) + len(durable_events.TYPE_PREFIX):]
    events = (r.checkpointed or []) + (plan.events if isinstance(plan, process.Plan) else [])
    if events and r.msg.type.startswith(DURABLE_INPUTS):
        for outcome, seconds in durable_events.step_times(events, int(time.time() * 1000)):
            metrics.durable_step(function, outcome, seconds)


def _log_failed(w: _Write, res: Exception) -> None:
    """A write that failed for good: its task is let go of (the recoverer finishes it if its
    lease runs out; a refused write means another worker holds it, or it is gone)."""
    r = w.running
    if isinstance(res, RETRYABLE) and not r.lost:
        log.error("could not write %s of task %s before its lease ran out (%s); "
                  "the recoverer will retry it", w.what, r.id, res)
    elif isinstance(res, LeaseLostError):
        log.warning("late %s of task %s refused: %s", w.what, r.id, res)
    elif isinstance(res, TaskNotFoundError):
        log.warning("task %s vanished before its %s was written", r.id, w.what)
    else:
        log.error("writing %s of task %s failed: %r", w.what, r.id, res)


class Writer:
    """Writes outcomes (batched, retried while the lease lasts) and progress. ``held``: the
    processor's tasks under lease, each let go of once its outcome is written; ``executing``: the
    ones whose handler still runs (a progress write is only for those)."""

    def __init__(self, ctx: Context, options: ServerOptions, held: dict[tuple[str, str], Running],
                 executing: set[Running]) -> None:
        self.ctx = ctx
        self.opts = options
        self.held = held
        self.executing = executing
        self._queued: list[_Write] = []
        self._writing = 0  # writes taken by the loop and not settled yet
        self._ready = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self._progress: set[asyncio.Task[None]] = set()  # progress writes in flight
        self.hold: Callable[[], bool] = lambda: False  # the fetcher is about to dequeue: the writes ride with it
        self._carried = 0  # writes taken by the fetcher (take) and not settled yet
        self._late: list[Call[Any]] = []  # replies to late waiters owed by writes that rode with a dequeue
        self.heap = HeapFreeze(options.freeze_heap)  # the heap frozen once the first attempt ended (worker/heap.py)

    @property
    def pending(self) -> int:
        """Outcomes queued or being written."""
        return len(self._queued) + self._writing + self._carried

    def _carriable(self) -> bool:
        """Whether the queued writes can ride with a dequeue: none waits for a progress write in
        flight (``_progress_first``: the loop sends those)."""
        return not any(w.running.progress_write is not None and not w.running.progress_write.done()
                       for w in self._queued)

    def kick(self) -> None:
        """The fetcher will not dequeue soon (it waits for a slot, for work, or backs off): the
        loop sends what is queued."""
        if self._queued or self._late:
            self._ready.set()

    def take(self) -> list[_Write]:
        """The queued writes, for the fetcher's next dequeue to carry (:meth:`write_with`); [] if
        none, or if one waits for a progress write."""
        if not self._queued or not self._carriable():
            return []
        batch, self._queued = self._queued, []
        self._carried += len(batch)
        return batch

    async def write_with(self, batch: list[_Write], ride: Ride) -> Dequeued:
        """Write ``batch`` (from :meth:`take`) and dequeue in one pipeline, the successes of the
        dequeued queue acknowledged in the dequeue's own call (``done_dequeue``). A write that met
        an outage goes back to the loop (retried while its lease lasts, as the loop's own); the
        dequeue's result is returned, or the error it met raised."""
        n = len(batch)
        try:
            batch, results, got = await self._send(batch, ride)
            again, replies = self._settle(batch, results)
        finally:
            self._carried -= n
        if again:
            self._queued[:0] = again
        self._late += replies
        if self._queued or self._late:
            self._ready.set()
        elif not self.pending:
            self.idle.set()
        if isinstance(got, BaseException):
            raise got
        assert isinstance(got, Dequeued)
        return got

    def put(self, r: Running, o: Outcome) -> None:
        """Queue the write of ``o``, the outcome of ``r`` (raises if its call cannot be built:
        nothing is queued then)."""
        ended = o.ended
        call = self._call(r, o, ended)
        r.ended = ended
        if self.ctx.metrics.enabled:
            self._count(r, o)
            _durable_metrics(self.ctx.metrics, r)
        self.heap.task_ended()
        since = asyncio.get_running_loop().time() if r.task is not None and isinstance(r.task._proc, process.Plan) \
            else 0.0
        self._queued.append(_Write(r, call, o.what, since))
        self.idle.clear()
        self._ready.set()

    def _call(self, r: Running, o: Outcome, ended: tuple[bool, Any] | None) -> Call[Any] | Done | Commit:
        b, a = self.ctx.broker, o.action
        reply = pack_outcome(r.id, *ended) if o.msg.reply_to and ended is not None else b""
        if a is Action.DONE:
            data = b"" if o.result is None else codec.encode_payload(o.result, "result")
            return Done(r.id, r.token, o.msg, reply, progressed=r.progress_sent, result=data)
        if a is Action.COMPLETE:
            return b.complete(r.queue, r.id, r.token, o.msg, reply)
        if a is Action.COMMIT:
            assert r.task is not None and isinstance(r.task._proc, process.Plan)
            plan = r.task._proc
            return b.commit(r.queue, r.id, r.token, o.msg, plan, self._timer(r, plan), reply, r.progress_sent)
        if a is Action.SNOOZE:
            return b.snooze(r.queue, r.id, r.token, o.delay * 1000)
        if a is Action.RETRY:
            return b.retry(r.queue, r.id, r.token, o.msg, o.delay * 1000)
        if a is Action.RUN_DONE:
            return b.run_end(r.queue, r.run_of, r.msg, "s", run=r.id, token=r.token, result=o.result)
        if a is Action.RUN_GIVEN_BACK:  # this worker may take a run of it again
            return b.run_end(r.queue, r.run_of, r.msg, "g", run=r.id, token=r.token)
        if a is Action.RUN_FAILED:  # archived when its failures exceed its max_retry (at once if final)
            return b.run_end(r.queue, r.run_of, r.msg, "f", run=r.id, token=r.token, failed=o.msg,
                             max_retry=-1 if o.final else None)
        if r.run_of:  # an archive of a targeted task's run archives the task at once
            return b.run_end(r.queue, r.run_of, o.msg, "f", run=r.id, token=r.token, failed=o.msg, max_retry=-1,
                             sign=o.sign)  # a run refused for its signature stays unsigned
        return b.archive(r.queue, r.id, r.token, o.msg, self.opts.archive_max_size,
                         int(self.opts.archive_max_age * 1000), o.sign, outcome=reply, mark_process=o.mark_process)

    def _timer(self, r: Running, plan: process.Plan) -> tuple[str, codec.Message] | None:
        """The timeout input a process's plan sets (with the input's own options, its tenant and
        version gate too), or None."""
        if plan.timer != "s" or plan.skipped or plan.remove:
            return None
        m = r.msg
        tmsg = codec.Message(type=m.type, payload=process.input_payload(plan.pid, "timeout", None),
                             enqueued_at_ms=self.ctx.clock.now_ms(), max_retry=m.max_retry, timeout_ms=m.timeout_ms,
                             retention_ms=m.retention_ms, retry_delay_ms=m.retry_delay_ms, headers=m.headers,
                             priority=m.priority, key=m.key, tenant=m.tenant, min_version=m.min_version)
        return new_task_id(), tmsg

    def _count(self, r: Running, o: Outcome) -> None:
        """The attempt's outcome in the metrics (a failed attempt counts as failed, and as what
        became of it)."""
        m, q, t = self.ctx.metrics, r.queue, r.msg.type
        if o.action.over:
            m.outcome(q, t, "succeeded")
        elif o.action in (Action.SNOOZE, Action.RUN_GIVEN_BACK):
            m.outcome(q, t, "snoozed")
        else:
            m.outcome(q, t, "failed")
            m.outcome(q, t, "archived" if o.action is Action.ARCHIVE else "retried")

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the queued outcomes to be written (shutdown)."""
        try:
            await asyncio.wait_for(self.idle.wait(), timeout)
        except asyncio.TimeoutError:
            log.error("gave up writing %d outcome(s); the recoverer will retry them", self.pending)

    async def run(self) -> None:
        """Write what is queued, one pipeline per turn, until cancelled."""
        while True:
            if self._late:
                late, self._late = self._late, []
                await self._reply(late)
                continue
            if not self._queued or (self.hold() and self._carriable()):
                if not self.pending:
                    self.idle.set()
                self._ready.clear()
                await self._ready.wait()  # (put, kick, or a ride's writes handed back)
                continue
            batch, self._queued = self._queued, []
            self._writing = len(batch)
            await self._progress_first(batch)
            batch, results, _ = await self._send(batch)
            again, replies = self._settle(batch, results)
            await self._retry(again, results)
            if replies:
                await self._reply(replies)
            self._writing = 0

    @staticmethod
    async def _progress_first(batch: list[_Write]) -> None:
        """A progress write still in flight goes first: pushed after the outcome, a waiting caller
        (Client.call's on_progress) would never see it."""
        writing = [w.running.progress_write for w in batch
                   if w.running.progress_write is not None and not w.running.progress_write.done()]
        if writing:
            await asyncio.wait(writing, timeout=1.0)

    def _settle(self, batch: list[_Write], results: list[Any]) -> tuple[list[_Write], list[Call[Any]]]:
        """Each write's result: a write that met an outage is to be sent again while the task's
        lease lasts; any other lets go of its task (``held``), a failure logged. Returns the writes
        to send again and the replies owed to late waiters."""
        loop = asyncio.get_running_loop()
        again: list[_Write] = []
        replies: list[Call[Any]] = []
        for w, res in zip(batch, results):
            r = w.running
            self._follow_up(w, res, replies)
            if isinstance(res, RETRYABLE) and not r.lost and loop.time() < r.lease_until:
                w.attempts += 1
                again.append(w)
                continue
            if isinstance(res, Exception):
                _log_failed(w, res)
            if self.held.get((r.queue, r.id)) is r:
                del self.held[(r.queue, r.id)]
        return again, replies

    def _follow_up(self, w: _Write, res: Any, replies: list[Call[Any]]) -> None:
        """What a written outcome sets off beside its task: a commit's metric, the outbox kicked
        for the children it told, the replies to waiters that came after the enqueue."""
        r = w.running
        if w.since and self.ctx.metrics.enabled and not isinstance(res, Exception):
            self.ctx.metrics.process_phase(r.msg.type[len(process.TYPE_PREFIX):], "commit",
                                           asyncio.get_running_loop().time() - w.since)
        if isinstance(res, Finished):
            if res.told:
                self.ctx.kick_outbox(r.queue)
            if res.late and r.ended is not None:
                outcome = pack_outcome(r.id, *r.ended)
                replies += [self.ctx.broker.reply(r.queue, inbox, outcome) for inbox in res.late]
            replies += wake_calls(self.ctx.broker, r.queue, res)  # clients waiting for its process (a run's result)

    async def _retry(self, again: list[_Write], results: list[Any]) -> None:
        """Queue again, after a backoff, the writes that met an outage (the server's health says
        so); all written, the health is good."""
        if again:
            delay = min(0.05 * 2 ** max(w.attempts for w in again), 2.0)
            self.ctx.health.failed(f"writing {len(again)} outcome(s) (retried in {delay:.2f}s)",
                                   next(r for r in results if isinstance(r, Exception)))
            await asyncio.sleep(delay)
            self._queued[:0] = again
        elif not any(isinstance(r, RETRYABLE) for r in results):
            self.ctx.health.ok()

    async def _send(self, batch: list[_Write], ride: Ride | None = None) -> tuple[list[_Write], list[Any], Any]:
        """Write ``batch`` in one pipeline (see ``_calls``), with the dequeue of ``ride`` if any.
        Returns the writes and, in the same order, each one's result (the parsed reply or the
        exception its write met), and the dequeue's result (or its exception; None without one)."""
        calls, groups, single, at = self._calls(batch, ride)
        if ride is not None and at < 0:  # no success of the dequeued queue: the dequeue alone, last
            calls.append(ride[2])
            groups.append([])
            at = len(calls) - 1
        started = asyncio.get_running_loop().time()
        try:
            replies = await self.ctx.exec.run_many(calls)
        except REDIS_ERRORS as exc:
            replies = [exc] * len(calls)
        self.ctx.metrics.loop("ack", asyncio.get_running_loop().time() - started)
        got: Any = None
        if at >= 0:
            got = replies[at]
            if isinstance(got, tuple):  # done_dequeue: (the acknowledgement's codes, the dequeue's)
                replies[at], got = got
        order: list[_Write] = []
        results: list[Any] = []
        singles = iter(single)
        for group, reply in zip(groups, replies):
            if group is None:
                order.append(next(singles))
                results.append(reply)
            else:
                order += group
                results += reply if isinstance(reply, list) else [reply] * len(group)
        return order, results, got

    def _calls(self, batch: list[_Write], ride: Ride | None = None
               ) -> tuple[list[Call[Any]], list[list[_Write] | None], list[_Write], int]:
        """The calls that write ``batch``: each retry, archive or complete as its own script call,
        the successes of each queue (``Done``) as one batched done call per queue (at most
        :data:`MAX_ACK` tasks each), the process inputs' commits likewise (:data:`MAX_COMMIT`).
        With ``ride``, the first batch of its queue's successes goes in its ``done_dequeue`` call.
        Returns the calls, per call the writes of a batched one (else None), the single writes and
        the index of the ``done_dequeue`` call (-1: none)."""
        calls: list[Call[Any]] = []
        groups: list[list[_Write] | None] = []  # per call: the writes of a batched done, else None
        single: list[_Write] = []
        acks: dict[str, list[tuple[_Write, Done]]] = {}
        commits: dict[str, list[tuple[_Write, Commit]]] = {}
        unsignalled: dict[str, None] = {}  # queues of outcomes whose script wakes no worker for the slot
        for w in batch:
            if isinstance(w.call, Done):
                acks.setdefault(w.running.queue, []).append((w, w.call))
            elif isinstance(w.call, Commit):
                commits.setdefault(w.running.queue, []).append((w, w.call))
            else:
                calls.append(w.call)
                single.append(w)
                groups.append(None)
                if w.call.script not in SIGNALS_FREED_SLOT:
                    unsignalled[w.running.queue] = None
        at = -1
        if ride is not None and ride[0] in acks:
            first, rest = acks[ride[0]][:MAX_ACK], acks.pop(ride[0])[MAX_ACK:]
            if rest:
                acks[ride[0]] = rest
            at = len(calls)
            calls.append(ride[1]([d for _, d in first]))
            groups.append([w for w, _ in first])
        _batched(acks, MAX_ACK, self.ctx.broker.done_many, calls, groups)
        _batched(commits, MAX_COMMIT, self.ctx.broker.proc_commit_many, calls, groups)
        for queue, items in commits.items():  # durable runs' events, each input's if it committed: a call a queue
            emit = durable_events.emit_call(queue, [i for w, _ in items for i in _durable_events(w)])
            if emit is not None:
                calls.append(emit)
                groups.append([])
        # a slot freed by a script that does not wake a worker for it (retry, snooze, a run's end:
        # includes/slots.lua) is announced by a rewake of its queue in the same pipeline, so the
        # workers a concurrency limit holds back do not sleep through it (its reply is not used)
        for queue in unsignalled:
            calls.append(self.ctx.broker.rewake(queue))
            groups.append([])
        return calls, groups, single, at

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

    # -- progress --------------------------------------------------------------------------------------

    def arm_progress(self, r: Running) -> None:
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
        self._progress.add(t)
        t.add_done_callback(self._progress.discard)

    async def _write_progress(self, r: Running, call: Call[int]) -> None:
        try:
            await self.ctx.exec.run(call)
        except (LeaseLostError, TaskNotFoundError):
            pass  # finished or lost meanwhile: nothing to show
        except REDIS_ERRORS as exc:
            self.ctx.health.failed(f"writing the progress of task {r.id}", exc)
        except AsynqpyError as exc:  # Redis full: progress is not worth refusing the task for
            log.debug("progress of task %s not written: %s", r.id, exc)

    # -- shutdown ----------------------------------------------------------------------------------------

    async def requeue(self, left: list[Running]) -> None:
        """Put the tasks still running at shutdown back at the front of their queues (a targeted
        run is given back), cancelling their handlers; nothing else is written for them."""
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
