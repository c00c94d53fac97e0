"""What Client and AsyncClient do with durable runs, written once (sans-I/O plans,
:mod:`asynqpy.core.spine.twin`): start, signal, cancel, and a run's result (docs/durable.md).

A run is a durable process (see :mod:`asynqpy.core.durable.replay`): ``start`` is ``start_process``,
``signal`` and ``cancel`` are ``call_process`` inputs answered as they commit. ``result`` reads
the run's record until the run is finished, waiting between two reads on the client's inbox of
the run's queue: registered with ``proc_watch``, it is woken by the next commit (or archive) of an
input of the run, or by the inbox's recheck (:mod:`asynqpy.core.results.plans`).
"""

from __future__ import annotations

import time
from typing import Any

from ..client.plans import ClientPlans, Wait, Writes
from ..model.errors import InvalidArgumentError, TaskNotFoundError
from ..model.task import TaskInfo
from ..processes import model as proc
from ..results.plans import Outcome, run_waiter
from ..security.keyplans import reveal_plan
from ..security.signing import open_message
from ..spine.stored import message_of
from ..spine.twin import Steps, planned
from .function import DurableFunction, process_type, run_id, signal_args
from .replay import COMPLETED, FINISHED, DurableRun, RunFailedError, start_args

ERROR_CHARS = 1000
"""The most of a failed ``ctx.task``'s error a run keeps (its notify's signal, then the step's
StepFailedError: docs/durable.md "Tasks")."""


def _run_of(run: DurableRun | str, queue: str | None) -> DurableRun:
    if isinstance(run, DurableRun):
        if queue is not None and queue != run.queue:
            raise InvalidArgumentError(f"run {run.id!r} lives in queue {run.queue!r}, not {queue!r}")
        return run
    if isinstance(run, str):
        return DurableRun(proc.validate_id(run), queue or "default")
    raise InvalidArgumentError(f"a durable run is a DurableRun (from client.start) or a run id, got {run!r}")


def _finished(run: DurableRun, p: proc.Process) -> tuple[bool, Any]:
    """Whether the run is over, and its result (raises RunFailedError for a run that did not
    complete)."""
    state = p.state if isinstance(p.state, dict) else {}
    status = state.get("status")
    if p.status == proc.ERROR:
        raise RunFailedError(run.id, "stopped in error", p.error)
    if status == COMPLETED:
        return True, state.get("result")
    if status in FINISHED:
        raise RunFailedError(run.id, str(status), str(state.get("error", "")))
    return False, None


class DurablePlans(ClientPlans):
    """The durable-run methods of the clients (mixed in before :class:`ClientPlans`)."""

    @planned
    def start(self, /, fn: DurableFunction | str, *args: Any, id: str | None = None, queue: str | None = None,
              _parent: dict[str, Any] | None = None, **options: Any) -> Steps[DurableRun]:
        """Start a run of durable function ``fn`` (made by ``@app.durable``, or its name) with
        ``args`` (msgpack-able). ``id``: the run's id (a new UUID if None); idempotent by id: a
        second start with an id that exists starts nothing and returns a handle with
        ``created=False``. ``queue``: the function's (or "default"). ``options``: those of
        ``start_process`` (max_retry, timeout, retention, retry_delay, headers, priority, tenant,
        min_worker_version: only workers of that version or newer take any input of the run, its
        steps' continuations, timers, signals and children's ends too; default: the function's)."""
        if isinstance(fn, DurableFunction):
            name, q = fn.name, queue or fn.queue
            if fn.min_worker_version and options.get("min_worker_version") is None:
                options["min_worker_version"] = fn.min_worker_version
        elif isinstance(fn, str):
            name, q = fn, queue or "default"
        else:
            raise InvalidArgumentError(f"client.start takes a durable function (@app.durable) or its name, got {fn!r}")
        rid = run_id(id)
        init: Any = start_args(args) if _parent is None else {"a": start_args(args), "p": _parent}  # (ctx.child)
        created = yield from ClientPlans.start_process.plan(self, process_type(name), rid, init, queue=q, **options)
        return DurableRun(rid, q, name, bool(created))

    @planned
    def signal(self, /, run: DurableRun | str, name: str, payload: Any = None, *, queue: str | None = None,
               timeout: float | None = 30.0, idempotency_key: str | None = None) -> Steps[bool]:
        """Send signal ``name`` with ``payload`` to a run; returns once the run has it (True), or
        False if the run had finished. A signal sent before the run waits for it is kept.
        ``idempotency_key``: a repeat with the same key is delivered once."""
        r = _run_of(run, queue)
        got = yield from ClientPlans.call_process.plan(self, r.id, signal_args(name, payload), timeout=timeout,
                                                       queue=r.queue, idempotency_key=idempotency_key)
        return bool(got)

    @planned
    def cancel(self, /, run: DurableRun | str, *, queue: str | None = None, reason: str = "",
               timeout: float | None = 30.0) -> Steps[bool]:
        """Cancel a run: it ends ``cancelled`` once the inputs sent before this one ran (a step
        running now finishes; its result is not used). False if it had finished."""
        r = _run_of(run, queue)
        got = yield from ClientPlans.call_process.plan(self, r.id, {"op": "cancel", "reason": reason},
                                                       timeout=timeout, queue=r.queue)
        return bool(got)

    @planned
    def result(self, task: TaskInfo | str | DurableRun, *, queue: str | None = None,
               timeout: float | None = None) -> Steps[Any]:
        """A task's result (see the task form below), or a durable run's: given a
        :class:`DurableRun`, what the function returned, once it has; raises RunFailedError if it
        failed, was cancelled or stopped in error, TimeoutError after ``timeout`` seconds.

        """
        if not isinstance(task, DurableRun):
            return (yield from ClientPlans.result.plan(self, task, queue=queue, timeout=timeout))
        run = _run_of(task, queue)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done, value = _finished(run, (yield from self._read_run(run)))
            if done:
                return value
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"durable run {run.id!r} did not finish within {timeout} s")
            try:  # woken by the next commit of one of its inputs (or the inbox's recheck): read again
                yield Wait(run.queue, run_waiter(run.id), left, True, self._watch_run(run))
            except TimeoutError:
                raise TimeoutError(f"durable run {run.id!r} did not finish within {timeout} s") from None

    def _read_run(self, run: DurableRun, read: Any = None) -> Steps[proc.Process]:
        """The run's process (its record alone), its state decrypted; ``read``: proc_read's reply,
        already in hand. Raises ProcessNotFoundError. (Sent on the client's shared pipeline, as the
        registration: a thousand runs' waiters woken at once share round trips and connections.)"""
        if read is None:
            read = (yield Writes([self.broker.proc_read(run.queue, run.id, 0, 0)]))[0]
        if isinstance(read, BaseException):
            raise read
        p = proc.parse_read(run.id, read, run.queue)
        if p is None:
            raise proc.ProcessNotFoundError(f"no process {run.id!r} in queue {run.queue!r}")
        if self.broker.ring is not None:  # its state encrypted (docs/encryption.md)
            p = yield from reveal_plan(self.broker.ring, p)
        return p

    def _watch_run(self, run: DurableRun) -> Steps[Outcome | None]:
        """A run waiter's start: registered with proc_watch, then the run read in the same round
        trip (a commit between the two is seen by one or the other): a wake-up at once if it ended
        (or is gone: the loop's read says so), None to wait for one."""
        inbox = self._inbox(run.queue).id
        b = self.broker
        got = yield Writes([b.proc_watch(run.queue, run.id, inbox), b.proc_read(run.queue, run.id, 0, 0)])
        woken = Outcome(run_waiter(run.id), run.queue, True)
        for g in got:
            if isinstance(g, BaseException):  # (Redis full, say: the caller gets it)
                raise g
        if not got[0]:  # no such process: the loop's read says so
            return woken
        try:
            done, _ = _finished(run, (yield from self._read_run(run, got[1])))
        except Exception:  # noqa: BLE001 - an end the loop's read raises again
            return woken
        return woken if done else None


    @planned
    def _verified_result(self, /, queue: str, id: str) -> Steps[Any]:
        """The result of completed task ``id`` (a ``ctx.task``'s), read from its own stored message
        and verified with this client's signing keys (core/durable/tasks.py: a signed run takes no
        result that does not verify): SignatureError or MalformedMessageError for one that does
        not, TaskNotFoundError for a task no longer kept."""
        stored = (yield [self.broker.get_task(queue, id)])[0]
        if stored is None or isinstance(stored, Exception):
            raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}: its result cannot be verified")
        msg = open_message(self.broker.signer, queue, id, message_of(stored))
        return (yield from self._reveal(msg.result, queue))

    @planned
    def _task_error(self, /, queue: str, id: str) -> Steps[str]:
        """The last error of task ``id`` (a ``ctx.task`` that ended other than completed: its
        archived message's ``last_error``), at most :data:`ERROR_CHARS` characters; '' when the
        task is no longer kept or ended without one (deleted, cancelled before it ran). With
        signing keys the message is verified first (SignatureError: a signed run takes no text
        that does not verify), as a completed task's result is (:meth:`_verified_result`)."""
        stored = (yield [self.broker.get_task(queue, id)])[0]
        if stored is None or isinstance(stored, Exception):
            return ""
        error = open_message(self.broker.signer, queue, id, message_of(stored)).last_error
        return error if len(error) <= ERROR_CHARS else error[:ERROR_CHARS - 1] + "…"


DurablePlans.result.__doc__ = (DurablePlans.result.__doc__ or "") + (ClientPlans.result.__doc__ or "")
