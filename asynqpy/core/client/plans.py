"""What Client and AsyncClient do, written once (sans-I/O): :class:`ClientPlans`.

Options are checked and tasks prepared here, the broker calls planned and their replies read; each
public method is a plan (:mod:`asynqpy.core.spine.twin`) whose steps the two facades run, one
synchronously and one with ``await``. The steps a client plan yields:

- a :class:`Writes` list: calls that write, sent on the client's write path (pipelined with
  concurrent callers' calls, followed by ``WAIT`` with ``wait_replicas``); each reply is the
  value or the exception its call raised;
- any other list of calls: one round trip on the executor (the reads and the plans of
  :mod:`~asynqpy.core.inspector.inspection`, :mod:`~asynqpy.core.workflows.plans`,
  :mod:`~asynqpy.core.processes.plans`);
- a :class:`~asynqpy.core.spine.broker.Call`: its value (raising its error);
- a :class:`Wait`: a task's outcome on the client's inbox (see :mod:`asynqpy.redisio.inbox`).

The enqueue dispatch (which broker call stores a prepared task) is :meth:`ClientPlans._one_call`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..inspector.inspection import Plans
from ..model import kinds
from ..model import options as opts
from ..model.clock import Clock
from ..model.errors import (
    AsynqpyError,
    DuplicateTaskError,
    InvalidArgumentError,
    NotReplicatedError,
    TaskIdConflictError,
    TaskNotFoundError,
    ThrottledError,
)
from ..model.task import TaskInfo
from ..processes import model as proc
from ..processes import plans as processes
from ..results.plans import RECHECK, Outcome, not_found, outcome_of_stored
from ..security import encryption as enc
from ..security.signing import SigningKeys, make_signer
from ..spine import tracing
from ..spine.broker import Broker, Call, Watched
from ..spine.keys import validate_queue
from ..spine.twin import Steps, planned
from ..workflows import plans as flows
from .claiming import Claiming
from .lone import LonePath
from .replies import (
    _SAME_ID,
    _one,
    _outcome,
    _raise_any,
    _Sending,
)
from .replies import (
    TaskInfoList as TaskInfoList,
)
from .sealing import Sealing

BatchItem = Any  # (type, payload) or (type, payload, {option: value})
BATCH = 1000
"""Tasks per enqueue_many script call."""
_KEYED_KINDS = (kinds.TaskKind.KEYED, kinds.TaskKind.PROCESS_INPUT)
"""The kinds a batch stores with enqueue_keyed_many (a process input is a keyed task)."""
PROCESS_OPTIONS = opts.allowed(kinds.TaskKind.PROCESS_INPUT)
"""The enqueue options a process input takes (its key, id and timing are the process's)."""


class Writes(list[Call[Any]]):
    """A step: calls that write, sent on the client's write path (see the module's docstring)."""

    __slots__ = ()


@dataclass(frozen=True)
class Wait:
    """A step: wait for task ``id``'s outcome on the client's inbox of ``queue`` (``timeout``
    seconds, None = no limit). ``start`` (the enqueue, or the watch call) is a plan run once the
    waiter is registered; it answers an outcome found at once, or None. ``late``: the task may
    have finished before the wait began (a watch, not a fresh enqueue)."""

    queue: str
    id: str
    timeout: float | None
    late: bool
    start: Steps[Outcome | BaseException | None]
    on_progress: Callable[[Any], Any] | None = None


class _Inbox(Protocol):
    id: str


@dataclass(frozen=True)
class _Plan:
    calls: list[Call[Any]]
    registers: bool  # calls[0] registers the queue names (every time: _plan)
    where: list[tuple[int, int]]  # per task: (index of its call, position in a batch call or -1)


_LONE = [(1, -1)]
"""The ``where`` of a plan for one task in one call."""


def _target(task: TaskInfo | str, queue: str | None) -> tuple[str, str]:
    """The (id, queue) a caller waits on: a TaskInfo names both; an id's queue is ``queue``."""
    if isinstance(task, TaskInfo):
        if queue is not None and queue != task.queue:
            raise InvalidArgumentError(f"queue={queue!r} contradicts the TaskInfo's queue {task.queue!r}")
        return task.id, task.queue
    if not isinstance(task, str) or not task:
        raise InvalidArgumentError(f"expected a TaskInfo or a task id, got {task!r}")
    return task, validate_queue("default" if queue is None else queue)


def _timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout) or timeout < 0:
        raise InvalidArgumentError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
    return float(timeout)


def _watched(id: str, queue: str, reply: Any) -> Outcome | BaseException | None:
    """A watch call's reply as an outcome (the task finished, or is unknown), or None (wait)."""
    if isinstance(reply, bytes):
        return outcome_of_stored(id, queue, reply)
    if reply is Watched.NOT_FOUND:
        return not_found(id, queue)
    return None


def _settle(got: Outcome | BaseException) -> Any:
    if isinstance(got, BaseException):
        raise got
    return got.value()


_ENQUEUE_DOC = opts.enqueue_doc()
"""Client.enqueue's docstring, its options from the option table (core/model/options.py)."""


class ClientPlans(Sealing, Claiming, LonePath):
    """The client's state and logic, shared by :class:`~asynqpy.Client` and
    :class:`~asynqpy.AsyncClient` (each adds its connection, write path and inbox)."""

    def __init__(self, max_payload_bytes: int, clock: Clock | None, signing_key: SigningKeys | None,
                 wait_replicas: int, wait_timeout: float, recheck: float = RECHECK, encryption: Any = None,
                 offload: Any = None) -> None:
        if not isinstance(recheck, (int, float)) or isinstance(recheck, bool) or not 0 < recheck < math.inf:
            raise InvalidArgumentError(f"recheck must be a number of seconds > 0, got {recheck!r}")
        self.recheck = float(recheck)
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int) or max_payload_bytes < 1:
            raise InvalidArgumentError(f"max_payload_bytes must be an int >= 1, got {max_payload_bytes!r}")
        if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise InvalidArgumentError(f"wait_replicas must be an int >= 0, got {wait_replicas!r}")
        if not isinstance(wait_timeout, (int, float)) or not 0 < wait_timeout < float("inf"):
            raise InvalidArgumentError(f"wait_timeout must be > 0 seconds, got {wait_timeout!r}")
        self.broker = Broker(clock, make_signer(signing_key), enc.check_ring(encryption))
        self.max_payload_bytes = max_payload_bytes
        self.offload = offload  # a blob store (asynqpy.worker.blobs), or None: docs/offload.md
        self.wait_replicas = wait_replicas
        self._wait_ms = max(1, int(wait_timeout * 1000))
        self._derivers: dict[str, opts.Deriver] = {}
        self._registers = {}  # (lone.py)
        self._ruled = {}

    def _process_input(self, ptype: str, pid: str, kind: str, args: Any, options: dict[str, Any],
                       reply_to: str = "", found: proc.Process | None = None) -> opts.Prepared:
        """A process input task, validated (docs/processes.md). ``found``: the process it is sent
        to (its inputs belong to its tenant and carry its version gate: a ``tenant=`` or
        ``min_worker_version=`` naming another is refused)."""
        proc.validate_id(pid)
        unknown = options.keys() - PROCESS_OPTIONS
        if unknown:
            raise InvalidArgumentError(opts.unknown_options("process input option", unknown, sorted(PROCESS_OPTIONS)))
        if found is not None:
            options = processes.input_options(found, options)
        ring = self.broker.ring
        if ring is not None and not enc.is_sealed(args):  # its arguments alone: pid and kind stay readable
            args = ring.seal(args, enc.PAYLOAD, options.get("queue", "default"), options.get("tenant") or "")
        return self._prepare(proc.task_type(proc.validate_type(ptype)), proc.input_payload(pid, kind, args),
                             {**options, "key": proc.key_of(pid)}, reply_to)

    @staticmethod
    def _check_status(p: proc.Process, kind: str) -> None:
        if kind == "call" and p.status == proc.ERROR:
            raise proc.ProcessError(f"process {p.id!r} is in error (broken by input {p.broken_by}: {p.error}); "
                                    "repair it first")
        if kind == "repair" and p.status != proc.ERROR:
            raise proc.ProcessError(f"process {p.id!r} is {p.status}, not in error: nothing to repair")

    def _deriver(self, template: opts.Prepared) -> opts.Deriver:
        return opts.Deriver(template, self.max_payload_bytes)

    def _prepare(self, task_type: str, payload: Any, kwargs: dict[str, Any], reply_to: str = "") -> opts.Prepared:
        if self.broker.ring is not None:  # seal, then offload the sealed bytes (docs/offload.md)
            payload = self._seal(task_type, payload, kwargs)
        generated = False
        if self.offload is not None:
            payload, kwargs, generated = self._offloaded(task_type, payload, kwargs)
        queue = kwargs.get("queue", "default")
        # the common case, options validated once per queue
        if not reply_to and len(kwargs) <= 1 and kwargs.keys() <= {"queue"} and type(queue) is str:
            derive = self._derivers.get(queue)
            if derive is None:
                derive = self._deriver(opts.prepare("t", None, queue=queue, max_payload_bytes=self.max_payload_bytes))
                if len(self._derivers) < 1000:
                    self._derivers[queue] = derive
            return derive(task_type, payload, opts.new_task_id(), self.broker.clock.local_ms())
        unknown = kwargs.keys() - opts.OPTIONS
        if unknown:
            raise InvalidArgumentError(opts.unknown_options("enqueue option", unknown, sorted(opts.OPTIONS)))
        kwargs.setdefault("max_payload_bytes", self.max_payload_bytes)
        kwargs.setdefault("now", self.broker.clock.local_ms() / 1000)
        p = opts.prepare(task_type, payload, reply_to=reply_to, **kwargs)
        if generated:
            p.generated_id = True
        return p

    def _plan(self, prepared: Sequence[opts.Prepared]) -> _Plan:
        """The broker calls for prepared tasks: the queues' registration first (every time, in the
        same round trip: a queue an operator removed since this client last used it is known
        again; a cache of the queues registered left such a queue unknown to the servers that
        find queues by pattern, and to the Inspector, for good); one enqueue_many call per queue
        per BATCH tasks for plain immediate tasks of a batch; one enqueue/schedule call per other
        task (unique, scheduled, or a lone task)."""
        if len(prepared) == 1:  # the common case, quickly
            p = prepared[0]
            return _Plan([self.broker.register_queues([p.queue]), self._one_call(p)], True, _LONE)
        calls: list[Call[Any]] = [self.broker.register_queues(sorted({p.queue for p in prepared}))]
        where: list[tuple[int, int]] = [(-1, -1)] * len(prepared)
        batches: dict[str, list[int]] = {}
        keyed: dict[str, list[int]] = {}
        single = len(prepared) == 1
        named: set[tuple[str, str]] = set()  # (queue, id) of the batch's tasks with an id of the caller's
        for i, p in enumerate(prepared):
            if not p.generated_id and not p.unique_ttl:
                if (p.queue, p.id) in named:  # the same id twice in one batch: the later one is refused
                    where[i] = _SAME_ID  # (not sent: a scheduled copy was taken for a resend of the first)
                    continue
                named.add((p.queue, p.id))
            if p.kind in _KEYED_KINDS and not single:
                keyed.setdefault(p.queue, []).append(i)
                continue
            if p.kind is not kinds.TaskKind.PLAIN or p.unique_ttl or single:
                calls.append(self._one_call(p))
            else:
                batches.setdefault(p.queue, []).append(i)
                continue
            where[i] = (len(calls) - 1, -1)
        self._batch_calls(prepared, batches, calls, where)
        self._keyed_calls(prepared, keyed, calls, where)
        return _Plan(calls, True, where)

    def _batch_calls(self, prepared: Sequence[opts.Prepared], batches: dict[str, list[int]],
                     calls: list[Call[Any]], where: list[tuple[int, int]]) -> None:
        """Append one enqueue_many call per queue per BATCH tasks; ``where`` tells each task its
        (call, position)."""
        for queue, idxs in batches.items():
            for start in range(0, len(idxs), BATCH):
                chunk = [prepared[i] for i in idxs[start:start + BATCH]]
                check = not all([p.generated_id for p in chunk])
                ci = len(calls)
                calls.append(self.broker.enqueue_many(queue, [(p.id, p.data) for p in chunk], check))
                for pos, i in enumerate(idxs[start:start + BATCH]):
                    where[i] = (ci, pos)

    def _keyed_calls(self, prepared: Sequence[opts.Prepared], batches: dict[str, list[int]],
                     calls: list[Call[Any]], where: list[tuple[int, int]]) -> None:
        """Append one enqueue_keyed_many call per queue per BATCH keyed tasks (in the batch's order:
        each key's tasks keep theirs); ``where`` tells each task its (call, -2 - position): its
        reply is the call's reply at that position."""
        for queue, idxs in batches.items():
            for start in range(0, len(idxs), BATCH):
                chunk = [prepared[i] for i in idxs[start:start + BATCH]]
                check = not all([p.generated_id for p in chunk])
                ci = len(calls)
                calls.append(self.broker.enqueue_keyed_many(queue, [(p.id, p.msg, p.data) for p in chunk], check))
                for pos, i in enumerate(idxs[start:start + BATCH]):
                    where[i] = (ci, -2 - pos)

    def _one_call(self, p: opts.Prepared) -> Call[Any]:
        """The call storing one prepared task, by its kind (core/model/kinds.py)."""
        return kinds.store_call(self.broker, p)

    def _split_batch(self, items: Iterable[BatchItem], common: dict[str, Any]) -> list[opts.Prepared]:
        out: list[opts.Prepared] = []
        derive: opts.Deriver | None = None
        fast = "task_id" not in common
        ids: list[str] = []
        now_ms = 0
        for item in items:
            if not isinstance(item, (tuple, list)) or not 1 <= len(item) <= 3 or (
                len(item) == 3 and item[2] is not None and not isinstance(item[2], Mapping)
            ):
                raise InvalidArgumentError("batch items are (type, payload) or (type, payload, {option: value})")
            payload = item[1] if len(item) > 1 else None
            if len(item) == 3 and item[2]:
                out.append(self._prepare(item[0], payload, {**common, **item[2]}))
            elif derive is not None:  # the common options are validated once
                if not ids:
                    ids = opts.new_task_ids(BATCH)
                id = ids.pop()
                if self.broker.ring is not None:
                    payload = self._seal(item[0], payload, common)
                if self.offload is not None:  # (the sealed bytes)
                    payload = self._claim(derive.template.queue, id, payload)
                out.append(derive(item[0], payload, id, now_ms))
            else:
                p = self._prepare(item[0], payload, dict(common))
                if fast:
                    derive, now_ms = self._deriver(p), p.values[2]
                out.append(p)
        return out

    def _results(
        self, prepared: list[opts.Prepared], plan: _Plan, replies: list[Any], return_exceptions: bool
    ) -> TaskInfoList:
        if plan.registers and isinstance(replies[0], Exception):
            if not isinstance(replies[0], NotReplicatedError):  # (registered on the master: the tasks tell)
                raise replies[0]
        if plan.where is _LONE:  # one task, one call (after the registration)
            if isinstance(replies[1], Exception) and not return_exceptions:
                raise replies[1]
            return TaskInfoList(prepared, replies[1:])
        # a batch call's result lists the positions it refused (also when it was not replicated)
        refused = {ci: set(getattr(r, "result", r)) for ci, r in enumerate(replies)
                   if isinstance(getattr(r, "result", r), list)}
        outcomes: list[Any] = []
        for p, (ci, pos) in zip(prepared, plan.where):
            r = _outcome(p, ci, pos, replies, refused)
            if isinstance(r, Exception) and not return_exceptions:
                raise r
            outcomes.append(r)
        return TaskInfoList(prepared, outcomes)

    def _inbox(self, queue: str) -> _Inbox:
        """This client's inbox on ``queue`` (made on first use)."""
        raise NotImplementedError

    # -- the public methods, each a plan ---------------------------------------------------------

    @planned
    def enqueue(self, /, task_type: str, payload: Any = None, **options: Any) -> Steps[TaskInfo]:
        if tracing.current is None:
            return (yield from self._enqueue(task_type, payload, options))
        with _Sending(task_type, options) as sending:
            info = yield from self._enqueue(task_type, payload, options)
            sending.task_id = info.id
        return info

    enqueue.__doc__ = _ENQUEUE_DOC

    def _enqueue(self, task_type: str, payload: Any, options: dict[str, Any]) -> Steps[TaskInfo]:
        existing = _on_conflict(options)
        yield from self._keys([options])
        p = self._prepare(task_type, payload, options)
        if p.kind is kinds.TaskKind.WAITING:
            _raise_any((yield Writes([self.broker.register_queues([p.queue])])))
            state = yield from flows.enqueue_after(self.broker, p)
            return TaskInfo.from_message(p.id, p.queue, state, p.msg, 0)
        refusal: AsynqpyError
        for attempt in range(_CONFLICT_TRIES):
            plan = self._plan([p])
            try:
                return self._results([p], plan, (yield Writes(plan.calls)), False)[0]  # type: ignore[no-any-return]
            except TaskIdConflictError as conflict:
                if not existing:
                    raise
                holder, refusal = p.id, conflict
            except DuplicateTaskError as dup:
                if not existing or isinstance(dup, ThrottledError) or not dup.holder:
                    raise
                holder, refusal = dup.holder, dup
            try:
                return (yield from Plans(self.broker).task_info(p.queue, holder))
            except TaskNotFoundError:
                # the task holding the id (or the key) finished between the refusal and the read
                # (issue 42 #11): the id is free now, so the same call is sent again
                if attempt == _CONFLICT_TRIES - 1:
                    raise refusal from None
        raise AssertionError("unreachable")  # pragma: no cover

    @planned
    def enqueue_many(
        self, /, items: Iterable[BatchItem], *, return_exceptions: bool = False, **options: Any
    ) -> Steps[TaskInfoList]:
        """Enqueue many tasks in one pipelined round trip. ``items``: (type, payload) or
        (type, payload, {option: value}) tuples; ``options`` apply to all. Every item is validated
        before anything is sent. Each task is stored atomically; a failing item (duplicate, id
        conflict) does not stop the others: with ``return_exceptions`` its exception takes its
        place in the returned list, else the first one is raised after all were attempted."""
        with _Sending("(batch)", options) as sending:
            if self.broker.ring is not None:
                items = list(items)
                yield from self._keys([options, *[{**options, **(i[2] or {})} for i in items
                                                   if isinstance(i, (tuple, list)) and len(i) == 3
                                                   and isinstance(i[2], Mapping)]])
            prepared = self._split_batch(items, options)
            sending.count = len(prepared)
            plan = self._plan(prepared)
            return self._results(prepared, plan, (yield Writes(plan.calls)), return_exceptions)

    @planned
    def result(self, task: TaskInfo | str, *, queue: str | None = None, timeout: float | None = None) -> Steps[Any]:
        """The result of a task (what its handler returned, or set with ``write_result``), waiting
        for it to finish without polling. ``task``: a :class:`TaskInfo` or a task id (in
        ``queue``, default "default"). Works before and after the task finished (after: while
        its ``retention`` keeps it).

        Raises :class:`TaskFailedError` if the task ended archived (with its last error),
        :class:`TaskNotFoundError` if there is no such task (deleted, or finished without
        retention before the wait began), ``TimeoutError`` after ``timeout`` seconds (None =
        no limit; the task is left alone)."""
        id, queue = _target(task, queue)
        limit = _timeout(timeout)
        got = yield Wait(queue, id, limit, True, self._watch(queue, id, self._inbox(queue).id))
        return (yield from self._reveal(got, queue))

    def _watch(self, queue: str, id: str, inbox: str) -> Steps[Outcome | BaseException | None]:
        """The watch call: the task's outcome if it finished (or is unknown), else None (wait)."""
        return _watched(id, queue, (yield self.broker.watch(queue, id, inbox)))

    @planned
    def call(self, /, task_type: str, payload: Any = None, *, timeout: float | None = None,
             on_progress: Callable[[Any], Any] | None = None, **options: Any) -> Steps[Any]:
        """Enqueue a task and return its result: :meth:`enqueue` then :meth:`result`, except that
        the outcome is pushed to this client as the task finishes (nothing is kept in Redis after
        it unless ``retention`` says so). Same options as :meth:`enqueue`; same errors as both.
        ``timeout`` counts from the call; when it passes, the task is left alone (it still runs).
        ``on_progress(value)`` is called with each progress report the handler makes
        (``task.progress``), in a thread that waits on this client (AsyncClient: in its event
        loop, and it may be a coroutine function). AsyncClient's calls made concurrently share
        one pipelined round trip for their enqueues and one connection for their wait (per
        queue)."""
        return (yield from self._call(task_type, payload, timeout, on_progress, options))

    def _call(self, task_type: str, payload: Any, timeout: float | None,
              on_progress: Callable[[Any], Any] | None, options: dict[str, Any],
              keep_finished: bool = False) -> Steps[Any]:
        """:meth:`call`; ``keep_finished``: a finished task holding the id is a conflict (raised),
        not replaced (an idempotent process call's repeat: :meth:`_process_call`)."""
        limit = _timeout(timeout)
        queue = validate_queue(options.get("queue", "default"))
        yield from self._keys([options])
        p = self._prepare(task_type, payload, options, reply_to=self._inbox(queue).id)
        p.keep_finished = keep_finished
        got = yield Wait(queue, p.id, limit, False, self._send([p]), on_progress)
        return (yield from self._reveal(got, queue))

    def _send(self, prepared: list[opts.Prepared]) -> Steps[None]:
        """Enqueue prepared tasks, raising the first refusal."""
        plan = self._plan(prepared)
        self._results(prepared, plan, (yield Writes(plan.calls)), False)

    # -- durable processes (docs/processes.md) ----------------------------------------------------

    @planned
    def start_process(self, /, process_type: str, process_id: str, args: Any = None, **options: Any) -> Steps[bool]:
        """Start process ``process_id`` of ``process_type``: its ``init`` input is queued (its
        processor runs with ``args``). Idempotent: False (nothing queued) if a process with this
        id exists in the queue. ``options``: queue, max_retry, timeout, retention, retry_delay,
        headers, priority (they apply to this input; its timers inherit them), tenant (the tenant
        the process belongs to: every input it gets, its timers too, takes turns as that tenant's
        task under its limits; docs/tenants.md), min_worker_version (the version gate of all its inputs)."""
        yield from self._keys([options])
        p = self._process_input(process_type, process_id, "init", args, options)
        calls = Writes()
        calls.append(self.broker.register_queues([p.queue]))  # the queue's registration first (see _plan)
        calls.append(self.broker.proc_start(p.queue, process_id, p.id, p.msg, p.data))
        replies = yield calls
        _raise_any(replies)
        return bool(replies[-1])

    @planned
    def call_process(self, /, process_id: str, args: Any = None, *, timeout: float | None = None,
                     queue: str = "default", idempotency_key: str | None = None, **options: Any) -> Steps[Any]:
        """Send a ``call`` input to a running process and return its processor's response
        (``Step.response``), pushed to this client when the input commits (no polling).
        ``idempotency_key``: repeats of the call with the same key (a retry after a timeout or a
        crash) send nothing new and return the first call's response (kept ``retention``
        seconds, a day by default). Raises ProcessNotFoundError, ProcessError (the process is in
        error: repair it), TaskFailedError (the input failed for good), TimeoutError (``timeout``
        s passed; the input still runs)."""
        return (yield from self._process_call(process_id, "call", args, timeout, queue, options, idempotency_key))

    @planned
    def repair_process(self, /, process_id: str, args: Any = None, *, timeout: float | None = None,
                       queue: str = "default", idempotency_key: str | None = None, **options: Any) -> Steps[Any]:
        """Send a ``repair`` input to a process in error; its processor decides how to mend it (a
        successful repair makes it running again). Returns the processor's response; errors and
        ``idempotency_key`` as :meth:`call_process` (ProcessError if the process is not in error)."""
        return (yield from self._process_call(process_id, "repair", args, timeout, queue, options, idempotency_key))

    def _process_call(self, pid: str, kind: str, args: Any, timeout: float | None, queue: str,
                      options: dict[str, Any], idempotency_key: str | None = None) -> Steps[Any]:
        send = options
        if idempotency_key is not None:  # a repeat answers the first call's outcome
            id = proc.call_id(proc.validate_id(pid), kind, idempotency_key)
            try:
                return (yield from ClientPlans.result.plan(self, id, queue=queue, timeout=timeout))
            except TaskNotFoundError:
                send = proc.idempotent_options(options, id)
        found = yield from processes.read(self.broker, queue, proc.validate_id(pid), 0, 0)
        self._check_status(found, kind)
        yield from self._keys([{"queue": queue, "tenant": found.tenant}])
        p = self._process_input(found.type, pid, kind, args, {**options, "queue": queue}, found=found)
        try:
            # a repeat that looked for the first call's outcome before that call was stored (a
            # concurrent repeat, slowed down) finds it finished here: a conflict, never a second
            # run (a finished task holding a caller's id is otherwise replaced: run again)
            return (yield from self._call(p.msg.type, p.msg.payload, timeout, None,
                                          {**send, "queue": queue, "key": p.msg.key, "tenant": p.msg.tenant or None,
                                           "min_worker_version": found.min_worker_version or None},
                                          keep_finished=idempotency_key is not None))
        except TaskIdConflictError:  # a concurrent repeat sent it first
            return (yield from ClientPlans.result.plan(self, send["task_id"], queue=queue, timeout=timeout))

    @planned
    def remove_process(self, process_id: str, *, queue: str = "default", timeout: float | None = 30.0,
                       now: bool = False) -> Steps[bool]:
        """Send a ``remove`` input: once the inputs queued before it ran, the process (record,
        history, timer) is deleted. Waits for that up to ``timeout`` seconds (None: no limit;
        0: do not wait), then raises TimeoutError (the removal still happens). ``now``: first
        delete the input whose turn it is if it waits for a retry (an init that keeps failing),
        so the removal does not wait behind its retries. False if there is no such process."""
        try:
            found = yield from processes.read(self.broker, queue, proc.validate_id(process_id), 0, 0)
        except proc.ProcessNotFoundError:
            return False
        if now:
            yield from processes.drop_failing(self.broker, queue, process_id)
        yield from self._keys([{"queue": queue, "tenant": found.tenant}])
        p = self._process_input(found.type, process_id, "remove", None, {"queue": queue}, found=found)
        if timeout == 0:
            yield from self._send([p])
        else:
            yield from ClientPlans.call.plan(self, p.msg.type, p.msg.payload, timeout=timeout, queue=queue,
                                             key=p.msg.key, tenant=p.msg.tenant or None,
                                             min_worker_version=found.min_worker_version or None)
        return True

    @planned
    def pause(self, queue: str) -> Steps[bool]:
        """Pause a queue (workers stop taking its tasks). False if it was already paused."""
        return bool(_one((yield Writes([self.broker.pause(queue)]))))

    @planned
    def unpause(self, queue: str) -> Steps[bool]:
        """Unpause a queue. False if it was not paused."""
        return bool(_one((yield Writes([self.broker.unpause(queue)]))))


_CONFLICT_TRIES = 5
"""How many times ``enqueue(..., on_conflict="return")`` sends its task again when the task that
refused it finished before it could be read (each time the id, or the key, was free a moment later)."""


def _on_conflict(options: dict[str, Any]) -> bool:
    """Pop ``on_conflict`` from enqueue options: True for "return" (a live task with the given
    ``task_id`` is returned as it is), False for "raise" (the default: TaskIdConflictError)."""
    how: object = options.pop("on_conflict", "raise")
    if how not in ("raise", "return"):
        raise InvalidArgumentError(f"on_conflict must be 'raise' or 'return', got {how!r}")
    if how == "return" and not options.keys() & {"task_id", "unique", "unique_key"}:
        raise InvalidArgumentError("on_conflict='return' needs a task_id or a unique key (a generated id "
                                   "never conflicts)")
    return how == "return"
