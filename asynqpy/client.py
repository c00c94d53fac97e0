"""Client and AsyncClient: put tasks on queues (now, later, uniquely, in batches).

Both share :class:`_ClientCore`, which validates options and builds the broker calls; the two
classes differ only in running those calls synchronously or with ``await``.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .core import flows, kinds, processes, tracing
from .core import options as opts
from .core import process as proc
from .core.broker import Broker, Call, Watched
from .core.clock import Clock
from .core.errors import (
    DuplicateTaskError,
    InvalidArgumentError,
    NotReplicatedError,
    TaskIdConflictError,
    TaskNotFoundError,
    ThrottledError,
)
from .core.inspection import Plans
from .core.keys import validate_queue
from .core.results import RECHECK, Outcome, not_found, outcome_of_stored
from .core.signing import SigningKeys, make_signer
from .core.task import TaskInfo
from .redisio.connection import async_client, sync_client
from .redisio.executor import AsyncExecutor, SyncExecutor, arun_plan, run_plan
from .redisio.inbox import AsyncInbox, SyncInbox

BatchItem = Any  # (type, payload) or (type, payload, {option: value})
BATCH = 1000
PROCESS_OPTIONS = opts.allowed(kinds.TaskKind.PROCESS_INPUT)
"""The enqueue options a process input takes (its key, id and timing are the process's)."""
"""Tasks per enqueue_many script call."""


@dataclass(frozen=True)
class _Plan:
    calls: list[Call[Any]]
    registers: bool  # calls[0] registers new queue names
    where: list[tuple[int, int]]  # per task: (index of its call, position in a batch call or -1)


_LONE = [(0, -1)]
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


class _ClientCore:
    def __init__(self, max_payload_bytes: int, clock: Clock | None, signing_key: SigningKeys | None,
                 wait_replicas: int, wait_timeout: float, recheck: float = RECHECK) -> None:
        if not isinstance(recheck, (int, float)) or isinstance(recheck, bool) or not 0 < recheck < math.inf:
            raise InvalidArgumentError(f"recheck must be a number of seconds > 0, got {recheck!r}")
        self.recheck = float(recheck)
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int) or max_payload_bytes < 1:
            raise InvalidArgumentError(f"max_payload_bytes must be an int >= 1, got {max_payload_bytes!r}")
        if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise InvalidArgumentError(f"wait_replicas must be an int >= 0, got {wait_replicas!r}")
        if not isinstance(wait_timeout, (int, float)) or not 0 < wait_timeout < float("inf"):
            raise InvalidArgumentError(f"wait_timeout must be > 0 seconds, got {wait_timeout!r}")
        self.broker = Broker(clock, make_signer(signing_key))
        self.max_payload_bytes = max_payload_bytes
        self.wait_replicas = wait_replicas
        self._wait_ms = max(1, int(wait_timeout * 1000))
        self._registered: set[str] = set()
        self._derivers: dict[str, opts.Deriver] = {}

    def _process_input(self, ptype: str, pid: str, kind: str, args: Any, options: dict[str, Any],
                       reply_to: str = "") -> opts.Prepared:
        """A process input task, validated (docs/processes.md)."""
        proc.validate_id(pid)
        unknown = options.keys() - PROCESS_OPTIONS
        if unknown:
            raise InvalidArgumentError(opts.unknown_options("process input option", unknown, sorted(PROCESS_OPTIONS)))
        return self._prepare(proc.task_type(proc.validate_type(ptype)), proc.input_payload(pid, kind, args),
                             {**options, "key": proc.key_of(pid)}, reply_to)

    def _start_calls(self, ptype: str, pid: str, args: Any, options: dict[str, Any]
                     ) -> tuple[opts.Prepared, list[Call[Any]]]:
        """The calls of start_process: the queue's registration if new, then proc_start."""
        p = self._process_input(ptype, pid, "init", args, options)
        calls: list[Call[Any]] = []
        if p.queue not in self._registered:
            calls.append(self.broker.register_queues([p.queue]))
        calls.append(self.broker.proc_start(p.queue, pid, p.id, p.msg, p.data))
        return p, calls

    def _started(self, p: opts.Prepared, replies: list[Any]) -> bool:
        _raise_any(replies)
        self._registered.add(p.queue)
        return bool(replies[-1])

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
        return opts.prepare(task_type, payload, reply_to=reply_to, **kwargs)

    def _plan(self, prepared: Sequence[opts.Prepared]) -> _Plan:
        """The broker calls for prepared tasks: a queue registration first if a queue is new; one
        enqueue_many call per queue per BATCH tasks for plain immediate tasks of a batch; one
        enqueue/schedule call per other task (unique, scheduled, or a lone task)."""
        if len(prepared) == 1 and prepared[0].queue in self._registered:  # the common case, quickly
            p = prepared[0]
            return _Plan([self._one_call(p)], False, _LONE)
        new = sorted({p.queue for p in prepared} - self._registered)
        calls: list[Call[Any]] = [self.broker.register_queues(new)] if new else []
        where: list[tuple[int, int]] = [(-1, -1)] * len(prepared)
        batches: dict[str, list[int]] = {}
        single = len(prepared) == 1
        for i, p in enumerate(prepared):
            if p.kind is not kinds.TaskKind.PLAIN or p.unique_ttl or single:
                calls.append(self._one_call(p))
            else:
                batches.setdefault(p.queue, []).append(i)
                continue
            where[i] = (len(calls) - 1, -1)
        for queue, idxs in batches.items():
            for start in range(0, len(idxs), BATCH):
                chunk = [prepared[i] for i in idxs[start:start + BATCH]]
                check = not all([p.generated_id for p in chunk])
                ci = len(calls)
                calls.append(self.broker.enqueue_many(queue, [(p.id, p.data) for p in chunk], check))
                for pos, i in enumerate(idxs[start:start + BATCH]):
                    where[i] = (ci, pos)
        return _Plan(calls, bool(new), where)

    def _one_call(self, p: opts.Prepared) -> Call[Any]:
        """The call storing one prepared task, by its kind (core/kinds.py)."""
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
                out.append(derive(item[0], payload, ids.pop(), now_ms))
            else:
                p = self._prepare(item[0], payload, dict(common))
                if fast:
                    derive, now_ms = self._deriver(p), p.values[2]
                out.append(p)
        return out

    def _results(
        self, prepared: list[opts.Prepared], plan: _Plan, replies: list[Any], return_exceptions: bool
    ) -> TaskInfoList:
        if plan.where is _LONE:  # one task, one call, queue known
            if isinstance(replies[0], Exception) and not return_exceptions:
                raise replies[0]
            return TaskInfoList(prepared, replies)
        if plan.registers and isinstance(replies[0], Exception):
            if not isinstance(replies[0], NotReplicatedError):  # (registered on the master: the tasks tell)
                raise replies[0]
        else:
            self._registered.update(p.queue for p in prepared)
        # a batch call's result lists the positions it refused (also when it was not replicated)
        refused = {ci: set(getattr(r, "result", r)) for ci, r in enumerate(replies)
                   if isinstance(getattr(r, "result", r), list)}
        outcomes: list[Any] = []
        for p, (ci, pos) in zip(prepared, plan.where):
            r = replies[ci]
            if pos >= 0:  # one task of a batch call
                if pos in refused.get(ci, ()):
                    r = TaskIdConflictError(f"a live task with id {p.id!r} exists in queue {p.queue!r}")
                elif not isinstance(r, Exception):
                    r = 0  # else the call's error (NotReplicatedError too) stands for each of its tasks
            if isinstance(r, Exception) and not return_exceptions:
                raise r
            outcomes.append(r)
        return TaskInfoList(prepared, outcomes)


class TaskInfoList(Sequence[Any]):
    """What enqueue_many returns: per task, in order, its :class:`TaskInfo` (or, with
    ``return_exceptions``, the exception that refused it). TaskInfo objects are built on access."""

    __slots__ = ("_prepared", "_outcomes")

    def __init__(self, prepared: list[opts.Prepared], outcomes: list[Any]) -> None:
        self._prepared = prepared
        self._outcomes = outcomes

    def __len__(self) -> int:
        return len(self._prepared)

    def _one(self, i: int) -> Any:
        r = self._outcomes[i]
        if isinstance(r, Exception):
            return r
        p = self._prepared[i]
        state = kinds.first_state(p.kind, r)
        if isinstance(r, tuple):  # debounced: (due, the task replaced)
            return replace(TaskInfo.from_message(p.id, p.queue, state, p.msg, r[0]), replaced=r[1])
        return TaskInfo.from_message(p.id, p.queue, state, p.msg, r if p.delay_ms > 0 else 0)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(len(self)))]
        return self._one(range(len(self))[i])

    @property
    def ids(self) -> list[str]:
        """The task ids, in order (cheaper than building every TaskInfo)."""
        return [p.id for p in self._prepared]

    def __add__(self, other: Sequence[Any]) -> list[Any]:
        return list(self) + list(other)

    def __radd__(self, other: Sequence[Any]) -> list[Any]:
        return list(other) + list(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TaskInfoList({len(self)} tasks)"


_ENQUEUE_DOC = opts.enqueue_doc()
"""Client.enqueue's docstring, its options from the option table (core/options.py)."""


class Client(_ClientCore):
    """Enqueues tasks (synchronous).

    ``redis``: a URL (default ``$ASYNQPY_REDIS_URL`` or redis://localhost:6379/0;
    ``redis+cluster://h:p,h:p`` for a Redis Cluster, ``redis+sentinel://h:p,h:p/master`` through
    Sentinel; see :mod:`asynqpy.connection`) or a redis-py client. ``max_payload_bytes``: the
    largest encoded payload accepted. ``signing_key``: bytes (or a list, the first signs) to sign
    every task with HMAC-SHA256 for workers that require it (see :mod:`asynqpy.signing`).

    ``wait_replicas`` (default 0: off): every write (enqueue, enqueue_many, pause, unpause) is
    followed by ``WAIT wait_replicas wait_timeout`` on the same connection of the same node, and
    is acknowledged only once that many replicas have it; else it raises (or, in a batch with
    ``return_exceptions``, returns) :class:`NotReplicatedError`: the write is on the master then,
    but a failover may lose it. With ``wait_replicas`` equal to each master's number of replicas,
    an acknowledged write survives the failover of its master (README: Redis Cluster and Sentinel).
    """

    def __init__(self, redis: Any = None, *, max_payload_bytes: int = 1 << 20, clock: Clock | None = None,
                 signing_key: SigningKeys | None = None, wait_replicas: int = 0, wait_timeout: float = 1.0,
                 recheck: float = RECHECK) -> None:
        super().__init__(max_payload_bytes, clock, signing_key, wait_replicas, wait_timeout, recheck)
        self.redis = sync_client(redis)
        self._owns = redis is None or isinstance(redis, str)
        self._exec = SyncExecutor(self.redis)
        self._pipeline = _SyncAutoPipeline(self._exec)
        self._inboxes: dict[str, SyncInbox] = {}

    def _inbox(self, queue: str) -> SyncInbox:
        inbox = self._inboxes.get(queue)
        if inbox is None:
            inbox = self._inboxes.setdefault(queue, SyncInbox(self.redis, self._exec, self.broker, queue,
                                                              self.recheck))
        return inbox

    def _run(self, calls: list[Call[Any]]) -> list[Any]:
        if self.wait_replicas:
            return self._exec.run_many_replicated(calls, self.wait_replicas, self._wait_ms)
        return self._pipeline.run(calls)  # concurrent threads share round trips

    def enqueue(self, task_type: str, payload: Any = None, **options: Any) -> TaskInfo:
        if tracing.current is None:
            return self._enqueue(task_type, payload, options)
        with _Sending(task_type, options) as sending:
            info = self._enqueue(task_type, payload, options)
            sending.task_id = info.id
        return info

    enqueue.__doc__ = _ENQUEUE_DOC

    def _enqueue(self, task_type: str, payload: Any, options: dict[str, Any]) -> TaskInfo:
        existing = _on_conflict(options)
        p = self._prepare(task_type, payload, options)
        if p.kind is kinds.TaskKind.WAITING:
            if p.queue not in self._registered:
                _raise_any(self._run([self.broker.register_queues([p.queue])]))
                self._registered.add(p.queue)
            state = run_plan(self._exec, flows.enqueue_after(self.broker, p))
            return TaskInfo.from_message(p.id, p.queue, state, p.msg, 0)
        plan = self._plan([p])
        try:
            return self._results([p], plan, self._run(plan.calls), False)[0]  # type: ignore[no-any-return]
        except TaskIdConflictError:
            if not existing:
                raise
            return run_plan(self._exec, Plans(self.broker).task_info(p.queue, p.id))
        except DuplicateTaskError as dup:
            if not existing or isinstance(dup, ThrottledError) or not dup.holder:
                raise
            try:
                return run_plan(self._exec, Plans(self.broker).task_info(p.queue, dup.holder))
            except TaskNotFoundError:  # the holder just finished
                raise dup from None

    def enqueue_many(
        self, items: Iterable[BatchItem], *, return_exceptions: bool = False, **options: Any
    ) -> TaskInfoList:
        """Enqueue many tasks in one pipelined round trip. ``items``: (type, payload) or
        (type, payload, {option: value}) tuples; ``options`` apply to all. Every item is validated
        before anything is sent. Each task is stored atomically; a failing item (duplicate, id
        conflict) does not stop the others: with ``return_exceptions`` its exception takes its
        place in the returned list, else the first one is raised after all were attempted."""
        with _Sending("(batch)", options) as sending:
            prepared = self._split_batch(items, options)
            sending.count = len(prepared)
            plan = self._plan(prepared)
            return self._results(prepared, plan, self._run(plan.calls), return_exceptions)

    def result(self, task: TaskInfo | str, *, queue: str | None = None, timeout: float | None = None) -> Any:
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
        inbox = self._inbox(queue)

        def watch() -> None:
            got = _watched(id, queue, self._exec.run(self.broker.watch(queue, id, inbox.id)))
            if got is not None:
                inbox.offer(id, got)

        return inbox.wait(id, limit, late=True, start=watch)

    def call(self, task_type: str, payload: Any = None, *, timeout: float | None = None,
             on_progress: Callable[[Any], Any] | None = None, **options: Any) -> Any:
        """Enqueue a task and return its result: :meth:`enqueue` then :meth:`result`, except that
        the outcome is pushed to this client as the task finishes (nothing is kept in Redis after
        it unless ``retention`` says so). Same options as :meth:`enqueue`; same errors as both.
        ``timeout`` counts from the call; when it passes, the task is left alone (it still runs).
        ``on_progress(value)`` is called with each progress report the handler makes
        (``task.progress``), in a thread that waits on this client."""
        limit = _timeout(timeout)
        queue = validate_queue(options.get("queue", "default"))
        inbox = self._inbox(queue)
        p = self._prepare(task_type, payload, options, reply_to=inbox.id)

        def enqueue() -> None:
            plan = self._plan([p])
            self._results([p], plan, self._run(plan.calls), False)

        return inbox.wait(p.id, limit, late=False, start=enqueue, on_progress=on_progress)

    # -- durable processes (docs/processes.md) ----------------------------------------------------

    def start_process(self, process_type: str, process_id: str, args: Any = None, **options: Any) -> bool:
        """Start process ``process_id`` of ``process_type``: its ``init`` input is queued (its
        processor runs with ``args``). Idempotent: False (nothing queued) if a process with this
        id exists in the queue. ``options``: queue, max_retry, timeout, retention, retry_delay,
        headers, priority (they apply to this input; its timers inherit them)."""
        p, calls = self._start_calls(process_type, process_id, args, options)
        return self._started(p, self._run(calls))

    def call_process(self, process_id: str, args: Any = None, *, timeout: float | None = None,
                     queue: str = "default", idempotency_key: str | None = None, **options: Any) -> Any:
        """Send a ``call`` input to a running process and return its processor's response
        (``Step.response``), pushed to this client when the input commits (no polling).
        ``idempotency_key``: repeats of the call with the same key (a retry after a timeout or a
        crash) send nothing new and return the first call's response (kept ``retention``
        seconds, a day by default). Raises ProcessNotFoundError, ProcessError (the process is in
        error: repair it), TaskFailedError (the input failed for good), TimeoutError (``timeout``
        s passed; the input still runs)."""
        return self._process_call(process_id, "call", args, timeout, queue, options, idempotency_key)

    def repair_process(self, process_id: str, args: Any = None, *, timeout: float | None = None,
                       queue: str = "default", idempotency_key: str | None = None, **options: Any) -> Any:
        """Send a ``repair`` input to a process in error; its processor decides how to mend it (a
        successful repair makes it running again). Returns the processor's response; errors and
        ``idempotency_key`` as :meth:`call_process` (ProcessError if the process is not in error)."""
        return self._process_call(process_id, "repair", args, timeout, queue, options, idempotency_key)

    def _process_call(self, pid: str, kind: str, args: Any, timeout: float | None, queue: str,
                      options: dict[str, Any], idempotency_key: str | None = None) -> Any:
        send = options
        if idempotency_key is not None:  # a repeat answers the first call's outcome
            id = proc.call_id(proc.validate_id(pid), kind, idempotency_key)
            try:
                return self.result(id, queue=queue, timeout=timeout)
            except TaskNotFoundError:
                send = proc.idempotent_options(options, id)
        found = run_plan(self._exec, processes.read(self.broker, queue, proc.validate_id(pid), 0, 0))
        self._check_status(found, kind)
        p = self._process_input(found.type, pid, kind, args, {**options, "queue": queue})
        try:
            return self.call(p.msg.type, p.msg.payload, timeout=timeout, **{**send, "queue": queue,
                                                                               "key": p.msg.key})
        except TaskIdConflictError:  # a concurrent repeat sent it first
            return self.result(send["task_id"], queue=queue, timeout=timeout)

    def remove_process(self, process_id: str, *, queue: str = "default", timeout: float | None = 30.0,
                       now: bool = False) -> bool:
        """Send a ``remove`` input: once the inputs queued before it ran, the process (record,
        history, timer) is deleted. Waits for that up to ``timeout`` seconds (None: no limit;
        0: do not wait), then raises TimeoutError (the removal still happens). ``now``: first
        delete the input whose turn it is if it waits for a retry (an init that keeps failing),
        so the removal does not wait behind its retries. False if there is no such process."""
        try:
            found = run_plan(self._exec, processes.read(self.broker, queue, proc.validate_id(process_id), 0, 0))
        except proc.ProcessNotFoundError:
            return False
        if now:
            run_plan(self._exec, processes.drop_failing(self.broker, queue, process_id))
        p = self._process_input(found.type, process_id, "remove", None, {"queue": queue})
        if timeout == 0:
            plan = self._plan([p])
            self._results([p], plan, self._run(plan.calls), False)
        else:
            self.call(p.msg.type, p.msg.payload, timeout=timeout, queue=queue, key=p.msg.key)
        return True

    def pause(self, queue: str) -> bool:
        """Pause a queue (workers stop taking its tasks). False if it was already paused."""
        return bool(_one(self._run([self.broker.pause(queue)])))

    def unpause(self, queue: str) -> bool:
        """Unpause a queue. False if it was not paused."""
        return bool(_one(self._run([self.broker.unpause(queue)])))

    def close(self) -> None:
        """Give the connection back to the pool; close the Redis client if this made it."""
        self._exec.close()
        if self._owns:
            self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_ClientCore):
    """The asyncio twin of :class:`Client`: same arguments, same methods, awaitable."""

    def __init__(self, redis: Any = None, *, max_payload_bytes: int = 1 << 20, clock: Clock | None = None,
                 signing_key: SigningKeys | None = None, wait_replicas: int = 0, wait_timeout: float = 1.0,
                 recheck: float = RECHECK) -> None:
        super().__init__(max_payload_bytes, clock, signing_key, wait_replicas, wait_timeout, recheck)
        self.redis = async_client(redis)
        self._owns = redis is None or isinstance(redis, str)
        self._exec = AsyncExecutor(self.redis)
        self._inboxes: dict[str, AsyncInbox] = {}
        self._pipeline = _AutoPipeline(self._exec)

    def _inbox(self, queue: str) -> AsyncInbox:
        inbox = self._inboxes.get(queue)
        if inbox is None:
            inbox = self._inboxes[queue] = AsyncInbox(self.redis, self._exec, self.broker, queue, self.recheck)
        return inbox

    async def _run(self, calls: list[Call[Any]]) -> list[Any]:
        if self.wait_replicas:
            return await self._exec.run_many_replicated(calls, self.wait_replicas, self._wait_ms)
        return await self._pipeline.run(calls)  # concurrent callers share round trips

    async def enqueue(self, task_type: str, payload: Any = None, **options: Any) -> TaskInfo:
        if tracing.current is None:
            return await self._enqueue(task_type, payload, options)
        with _Sending(task_type, options) as sending:
            info = await self._enqueue(task_type, payload, options)
            sending.task_id = info.id
        return info

    enqueue.__doc__ = _ENQUEUE_DOC

    async def _enqueue(self, task_type: str, payload: Any, options: dict[str, Any]) -> TaskInfo:
        existing = _on_conflict(options)
        p = self._prepare(task_type, payload, options)
        if p.kind is kinds.TaskKind.WAITING:
            if p.queue not in self._registered:
                _raise_any(await self._run([self.broker.register_queues([p.queue])]))
                self._registered.add(p.queue)
            state = await arun_plan(self._exec, flows.enqueue_after(self.broker, p))
            return TaskInfo.from_message(p.id, p.queue, state, p.msg, 0)
        plan = self._plan([p])
        try:
            return self._results([p], plan, await self._run(plan.calls), False)[0]  # type: ignore[no-any-return]
        except TaskIdConflictError:
            if not existing:
                raise
            return await arun_plan(self._exec, Plans(self.broker).task_info(p.queue, p.id))
        except DuplicateTaskError as dup:
            if not existing or isinstance(dup, ThrottledError) or not dup.holder:
                raise
            try:
                return await arun_plan(self._exec, Plans(self.broker).task_info(p.queue, dup.holder))
            except TaskNotFoundError:  # the holder just finished
                raise dup from None

    async def enqueue_many(
        self, items: Iterable[BatchItem], *, return_exceptions: bool = False, **options: Any
    ) -> TaskInfoList:
        """See :meth:`Client.enqueue_many`."""
        with _Sending("(batch)", options) as sending:
            prepared = self._split_batch(items, options)
            sending.count = len(prepared)
            plan = self._plan(prepared)
            return self._results(prepared, plan, await self._run(plan.calls), return_exceptions)

    async def result(self, task: TaskInfo | str, *, queue: str | None = None, timeout: float | None = None) -> Any:
        """See :meth:`Client.result`."""
        id, queue = _target(task, queue)
        limit = _timeout(timeout)
        inbox = self._inbox(queue)
        fut = inbox.expect(id, late=True)
        try:
            got = _watched(id, queue, await self._exec.run(self.broker.watch(queue, id, inbox.id)))
        except BaseException:
            inbox.forget(id, fut, started=False)
            raise
        inbox.started(id)
        if got is not None:
            inbox.forget(id, fut)
            return _settle(got)
        return await inbox.wait(id, fut, limit)

    async def call(self, task_type: str, payload: Any = None, *, timeout: float | None = None,
                   on_progress: Callable[[Any], Any] | None = None, **options: Any) -> Any:
        """See :meth:`Client.call`. Calls made concurrently share one pipelined round trip for
        their enqueues and one connection for their wait (per queue). ``on_progress`` may be a
        plain function or a coroutine function."""
        limit = _timeout(timeout)
        queue = validate_queue(options.get("queue", "default"))
        inbox = self._inbox(queue)
        p = self._prepare(task_type, payload, options, reply_to=inbox.id)
        fut = inbox.expect(p.id, late=False, on_progress=on_progress)
        try:
            plan = self._plan([p])
            calls = plan.calls
            replies = await self._run(calls)
            self._results([p], plan, replies, False)
        except BaseException:
            inbox.forget(p.id, fut, started=False)
            raise
        inbox.started(p.id)  # stored: from now on a recheck may look at it (not before)
        return await inbox.wait(p.id, fut, limit)

    async def start_process(self, process_type: str, process_id: str, args: Any = None, **options: Any) -> bool:
        """See :meth:`Client.start_process`."""
        p, calls = self._start_calls(process_type, process_id, args, options)
        return self._started(p, await self._run(calls))

    async def call_process(self, process_id: str, args: Any = None, *, timeout: float | None = None,
                           queue: str = "default", idempotency_key: str | None = None, **options: Any) -> Any:
        """See :meth:`Client.call_process`."""
        return await self._process_call(process_id, "call", args, timeout, queue, options, idempotency_key)

    async def repair_process(self, process_id: str, args: Any = None, *, timeout: float | None = None,
                             queue: str = "default", idempotency_key: str | None = None, **options: Any) -> Any:
        """See :meth:`Client.repair_process`."""
        return await self._process_call(process_id, "repair", args, timeout, queue, options, idempotency_key)

    async def _process_call(self, pid: str, kind: str, args: Any, timeout: float | None, queue: str,
                            options: dict[str, Any], idempotency_key: str | None = None) -> Any:
        send = options
        if idempotency_key is not None:  # a repeat answers the first call's outcome
            id = proc.call_id(proc.validate_id(pid), kind, idempotency_key)
            try:
                return await self.result(id, queue=queue, timeout=timeout)
            except TaskNotFoundError:
                send = proc.idempotent_options(options, id)
        found = await arun_plan(self._exec, processes.read(self.broker, queue, proc.validate_id(pid), 0, 0))
        self._check_status(found, kind)
        p = self._process_input(found.type, pid, kind, args, {**options, "queue": queue})
        try:
            return await self.call(p.msg.type, p.msg.payload, timeout=timeout, **{**send, "queue": queue,
                                                                                     "key": p.msg.key})
        except TaskIdConflictError:  # a concurrent repeat sent it first
            return await self.result(send["task_id"], queue=queue, timeout=timeout)

    async def remove_process(self, process_id: str, *, queue: str = "default",
                             timeout: float | None = 30.0, now: bool = False) -> bool:
        """See :meth:`Client.remove_process`."""
        try:
            found = await arun_plan(self._exec, processes.read(self.broker, queue, proc.validate_id(process_id), 0,
                                                               0))
        except proc.ProcessNotFoundError:
            return False
        if now:
            await arun_plan(self._exec, processes.drop_failing(self.broker, queue, process_id))
        p = self._process_input(found.type, process_id, "remove", None, {"queue": queue})
        if timeout == 0:
            plan = self._plan([p])
            self._results([p], plan, await self._run(plan.calls), False)
        else:
            await self.call(p.msg.type, p.msg.payload, timeout=timeout, queue=queue, key=p.msg.key)
        return True

    async def pause(self, queue: str) -> bool:
        """See :meth:`Client.pause`."""
        return bool(_one(await self._run([self.broker.pause(queue)])))

    async def unpause(self, queue: str) -> bool:
        """See :meth:`Client.unpause`."""
        return bool(_one(await self._run([self.broker.unpause(queue)])))

    async def close(self) -> None:
        for inbox in self._inboxes.values():
            await inbox.close()
        if self._owns:
            await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _AutoPipeline:
    """Sends the calls of concurrent callers together: a caller that finds nothing in flight sends
    its calls at once (a lone producer pays nothing); callers that come while a round trip is in
    flight queue up and go out together in the next pipeline. So 100 coroutines enqueueing at once
    share round trips and one connection, and 1 000 concurrent ``call()``s take a few round trips,
    not 1 000 connections. Each caller gets its own replies (exceptions in place); a coroutine's
    own calls stay in order (it awaits each)."""

    def __init__(self, executor: AsyncExecutor) -> None:
        self.exec = executor
        self.queued: list[tuple[list[Call[Any]], asyncio.Future[list[Any]]]] = []
        self.flusher: asyncio.Task[None] | None = None
        self.busy = False  # a round trip is in flight (a direct one, or the flusher's)

    async def run(self, calls: list[Call[Any]]) -> list[Any]:
        if not self.busy:
            self.busy = True
            try:
                if len(calls) == 1:
                    return [await _arun_or_exc(self.exec, calls[0])]
                return await self.exec.run_many(calls)
            finally:
                if self.queued and self.flusher is None:
                    self.flusher = asyncio.create_task(self._flush(), name="asynqpy-client-pipeline")
                else:
                    self.busy = self.flusher is not None
        fut: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.queued.append((calls, fut))
        return await fut

    async def _flush(self) -> None:
        try:
            while self.queued:
                batch, self.queued = self.queued, []
                try:
                    results = await self.exec.run_many([c for calls, _ in batch for c in calls])
                except Exception as exc:  # noqa: BLE001 - each caller gets it
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                i = 0
                for calls, fut in batch:
                    if not fut.done():
                        fut.set_result(results[i:i + len(calls)])
                    i += len(calls)
        finally:
            self.flusher = None
            self.busy = False


class _Waiter:
    """A thread's calls queued behind a round trip in flight (see :class:`_SyncAutoPipeline`)."""

    __slots__ = ("calls", "done", "lead", "results", "error")

    def __init__(self, calls: list[Call[Any]]) -> None:
        self.calls = calls
        self.done = threading.Lock()  # held until the results are in (cheaper than an Event)
        self.done.acquire()
        self.lead = False  # promoted: this thread sends the queued calls (its own among them)
        self.results: list[Any] = []
        self.error: BaseException | None = None


class _SyncAutoPipeline:
    """The threads' twin of :class:`_AutoPipeline`: a thread that finds no round trip in flight
    sends its calls at once; threads that come meanwhile queue up, and when the round trip ends
    the first of them is woken to send everything queued in one pipeline (then it hands over to
    the next queued thread, if any). So a thread never sends more than one round trip of others'
    calls, 8 threads enqueueing at once share round trips and one connection, and each gets its
    own replies (exceptions in place), its own calls in order."""

    def __init__(self, executor: SyncExecutor) -> None:
        self.exec = executor
        self.lock = threading.Lock()
        self.queued: list[_Waiter] = []
        self.busy = False

    def run(self, calls: list[Call[Any]]) -> list[Any]:
        with self.lock:
            leader = not self.busy
            if leader:
                self.busy = True
            else:
                me = _Waiter(calls)
                self.queued.append(me)
        if leader:
            try:
                if len(calls) == 1:
                    return [_run_or_exc(self.exec, calls[0])]
                return self.exec.run_many(calls)
            finally:
                self._hand_over()
        me.done.acquire()
        if me.lead:
            self._send_queued()
        if me.error is not None:
            raise me.error
        return me.results

    def _hand_over(self) -> None:
        """The round trip ended: wake the first queued thread to send the queue, or go idle."""
        with self.lock:
            if not self.queued:
                self.busy = False
                return
            first = self.queued[0]
            first.lead = True
        first.done.release()

    def _send_queued(self) -> None:
        with self.lock:
            batch, self.queued = self.queued, []
        try:
            try:
                results = self.exec.run_many([c for w in batch for c in w.calls])
            except BaseException as exc:  # noqa: BLE001 - each caller gets it
                for w in batch:
                    w.error = exc
            else:
                i = 0
                for w in batch:
                    w.results = results[i:i + len(w.calls)]
                    i += len(w.calls)
            for w in batch:
                if not w.lead:
                    w.done.release()
        finally:
            self._hand_over()


class _Sending:
    """A producer span around an enqueue (or a batch) while tracing is on; nothing otherwise. The
    span's trace context goes into ``options``'s headers (unless they are not a mapping: the
    enqueue then refuses them as usual); the span ends with the task id or the batch's size, or
    the error."""

    def __init__(self, task_type: str, options: dict[str, Any]) -> None:
        self.tracer = tracing.current
        self.task_id: str | None = None
        self.count = 1
        self.span: Any = None
        if self.tracer is not None:
            queue, headers = str(options.get("queue", "default")), options.get("headers")
            if headers is None or isinstance(headers, Mapping):
                self.span, options["headers"] = self.tracer.send(queue, task_type,
                                                                 dict(headers) if headers is not None else None)
            else:
                self.span, _ = self.tracer.send(queue, task_type, None)

    def __enter__(self) -> _Sending:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        if self.tracer is not None:
            self.tracer.sent(self.span, self.task_id, error, self.count)


def _raise_any(replies: list[Any]) -> None:
    for r in replies:
        if isinstance(r, Exception):
            raise r


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


def _one(replies: list[Any]) -> Any:
    if isinstance(replies[0], Exception):
        raise replies[0]
    return replies[0]


def _run_or_exc(ex: SyncExecutor, call: Call[Any]) -> Any:
    try:
        return ex.run(call)
    except Exception as exc:  # noqa: BLE001 - re-raised by _results
        return exc


async def _arun_or_exc(ex: AsyncExecutor, call: Call[Any]) -> Any:
    try:
        return await ex.run(call)
    except Exception as exc:  # noqa: BLE001 - re-raised by _results
        return exc
