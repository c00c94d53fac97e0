"""Inspector and AsyncInspector: read queues, tasks and servers, and control them.

Both run the same plans (:mod:`asynqpy.inspection`): the sync class runs each round trip with a
blocking pipeline, the async one awaits it. Every call is O(1) or O(page size) in Redis work
whatever the queue depth; bulk operations go in bounded batches (see docs/architecture.md).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from .core import control, cron, flows, processes
from .core import cron as _cron
from .core import events as ev
from .core import limits as _limits
from .core.broker import Broker, Call, QueueStats
from .core.clock import Clock
from .core.events import TaskEvent
from .core.flows import WorkflowNode
from .core.inspection import DailyStats, GroupInfo, Plan, Plans, QueueInfo
from .core.keys import control_ack, queue_keys
from .core.limits import QueueLimits
from .core.process import Process
from .core.server_record import ServerInfo, WorkerInfo
from .core.signing import SigningKeys, make_signer
from .core.task import TaskInfo, TaskState
from .redisio.connection import async_client, read_timeout, sync_client
from .redisio.executor import AsyncExecutor, SyncExecutor, arun_plan, run_plan

T = TypeVar("T")

__all__ = ["AsyncInspector", "DailyStats", "GroupInfo", "Inspector", "QueueInfo", "QueueLimits", "ServerInfo",
           "WorkerInfo"]


class Inspector:
    """Synchronous inspection and control. ``redis``: a URL or a redis-py client (default
    ``$ASYNQPY_REDIS_URL``). Unknown queues raise QueueNotFoundError, unknown task ids
    TaskNotFoundError, an action the task's state forbids TaskStateError. Usable as a context
    manager (closes the client it made). With signed tasks, give it the ``signing_key`` (as the
    client's) so the message it rewrites when cancelling a task stays signed."""

    def __init__(self, redis: Any = None, *, clock: Clock | None = None,
                 signing_key: SigningKeys | None = None) -> None:
        self.redis = sync_client(redis)
        self._owns = redis is None or isinstance(redis, str)
        self.broker = Broker(clock, make_signer(signing_key))
        self._exec = SyncExecutor(self.redis)
        self._plans = Plans(self.broker)

    def _run(self, plan: Plan[T]) -> T:
        return run_plan(self._exec, plan)

    def queues(self) -> list[str]:
        """Names of every known queue, sorted."""
        return self._run(self._plans.queues())

    def queue_info(self, queue: str) -> QueueInfo:
        """Counts per state, paused, latency, counters, memory: one round trip, O(1) in Redis."""
        return self._run(self._plans.queue_info(queue))

    def all_queue_info(self, memory: bool = True) -> list[QueueInfo]:
        """:meth:`queue_info` of every queue (one pipelined round trip after the queue list).
        ``memory`` False: without the sampled memory reading (``memory_bytes`` None), about a
        fifth of the work."""
        return self._run(self._plans.all_queue_info(memory))

    def history(self, queue: str, days: int = 7) -> list[DailyStats]:
        """Processed/failed per UTC day, newest first (today included), ``days`` from 1 to 90."""
        return self._run(self._plans.history(queue, days))

    def list_tasks(self, queue: str, state: TaskState | str, page: int = 1, page_size: int = 30,
                   group: str = "") -> list[TaskInfo]:
        """One page (1-based, at most 1000 tasks) of the tasks in ``state``. Order: pending oldest
        first (the order they run in); active, scheduled and retry by lease expiry / due time;
        archived and completed newest first; aggregating (give the ``group``) oldest first. A page
        starting past position 10**15 is an InvalidArgumentError."""
        return self._run(self._plans.list_tasks(queue, state, page, page_size, group))

    def groups(self, queue: str) -> list[GroupInfo]:
        """The queue's aggregation groups: name, size, when the oldest and newest task joined."""
        return self._run(self._plans.groups(queue))

    def events(self, queue: str, *, since: datetime | float | str | None = None,
               follow: bool = False) -> Iterator[TaskEvent]:
        """The queue's lifecycle events, oldest first: the ones kept since ``since`` (None = all
        kept; a datetime or Unix seconds; an event's ``stream_id`` = the events after it), then
        with ``follow`` the new ones as they happen (a blocking read, no polling; stop by leaving
        the loop). A queue whose stream is off (:meth:`set_events`) has none."""
        reader = ev.Reader(queue, since, follow, block_ms=_block_ms(self.redis))
        while not reader.done:
            yield from reader.feed(self._exec.run(reader.call()))

    def set_limits(self, queue: str, *, concurrency: int | None = None, rate: float | str | None = None,
                   burst: int | None = None) -> QueueLimits:
        """Limit the queue across every worker: at most ``concurrency`` of its tasks active at once;
        at most ``rate`` starts per second (a number, or text such as "100/s", "30/m") with
        bursts of up to ``burst`` (default 1: evenly spaced). Limits not given stay as they are;
        they hold from the next dequeue of any worker. Returns the limits now in force."""
        for r in self._exec.run_many(_limits.set_calls(queue, concurrency, rate, burst)):
            if isinstance(r, Exception):
                raise r
        return self.limits(queue)

    def clear_limits(self, queue: str) -> None:
        """Remove every limit of the queue."""
        self._exec.run(_limits.clear_call(queue))

    def limits(self, queue: str) -> QueueLimits:
        """The queue's limits (None where there is none)."""
        return self._exec.run(_limits.get_call(queue))

    def set_events(self, queue: str, max_len: int) -> None:
        """Keep about ``max_len`` events in the queue's stream (default 10 000); 0 turns the stream
        off (no event is written; the kept ones are deleted)."""
        self._exec.run(ev.set_cap(queue, max_len))
        if max_len == 0:
            self.redis.delete(queue_keys(queue).events)

    def events_max_len(self, queue: str) -> int:
        """The queue's stream cap (0 = off)."""
        return self._exec.run(ev.get_cap(queue))

    def task_info(self, queue: str, id: str) -> TaskInfo:
        """One task's info."""
        return self._run(self._plans.task_info(queue, id))

    def workflow(self, queue: str, id: str, limit: int = 1000) -> list[WorkflowNode]:
        """The workflow task ``id`` belongs to (``after=``, ``chain``, ``group``), as trees: its
        roots (the ancestors waiting on nothing) with, under each task, the tasks registered as
        waiting on it and their state; at most ``limit`` tasks. A task with neither parents nor
        children is its own one-node tree."""
        return self._run(flows.tree(queue, id, limit))

    def process(self, queue: str, process_id: str, first: int = 0, count: int = 20) -> Process:
        """A durable process (docs/processes.md): its status, state, timer and ``count`` events of
        its history from event ``first`` (1-based; 0: its latest ``count``). Raises
        ProcessNotFoundError."""
        return self._run(processes.read(self._plans.b, queue, process_id, first, count, True))

    def processes(self, queue: str, start: int = 0, count: int = 100,
                  status: str | None = None) -> tuple[int, list[Process]]:
        """(how many processes ``queue`` has, ``count`` of them from rank ``start``, the most
        recently changed first; without their history). ``status`` ("starting", "running",
        "error"): only the processes in it, and how many there are (this reads every record of
        the queue: O(processes), for an operator looking for the broken ones)."""
        return self._run(processes.listing(self._plans.b, queue, start, count, status))

    def stop_server(self, server_id: str, timeout: float = 10.0) -> str:
        """Stop a server gracefully, as SIGTERM does (its running tasks finish within its
        shutdown_timeout, or go back to their queues), from any machine. Returns the server's
        acknowledgement ("stopping"). ServerNotFoundError for a server that is not alive;
        TimeoutError if it did not acknowledge within ``timeout`` seconds."""
        return self._control(server_id, "stop", timeout)

    def quiet_server(self, server_id: str, timeout: float = 10.0) -> str:
        """Make a server take no new task (its running ones finish): before a deploy. Returns
        "quiet" once no task will be taken. Errors as :meth:`stop_server`."""
        return self._control(server_id, "quiet", timeout)

    def resume_server(self, server_id: str, timeout: float = 10.0) -> str:
        """Make a quiet server take tasks again. Returns "running" ("stopping" if it is
        stopping). Errors as :meth:`stop_server`."""
        return self._control(server_id, "resume", timeout)

    def _control(self, server_id: str, action: str, timeout: float) -> str:
        cid = self._run(control.send(self._plans.b, server_id, action))
        key, deadline = control_ack(cid), time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"server {server_id} did not acknowledge {action} within {timeout:g}s")
            got = self._exec.run(Call(lambda r: r, command=("BLPOP", key, max(0.01, min(1.0, left)))))
            if got:
                return str(got[1].decode() if isinstance(got[1], bytes) else got[1])

    def pause(self, queue: str) -> bool:
        """Pause a queue (workers stop taking its tasks); False if it already was."""
        return self._run(self._plans.pause(queue))

    def unpause(self, queue: str) -> bool:
        """Unpause a queue; False if it was not paused."""
        return self._run(self._plans.unpause(queue))

    def servers(self) -> list[ServerInfo]:
        """Live servers and the tasks each runs (as of its last heartbeat)."""
        return self._run(self._plans.servers())

    def delete_task(self, queue: str, id: str) -> None:
        """Delete a task that is not active (TaskStateError if it is: cancel it instead). Releases
        its uniqueness lock."""
        self._run(self._plans.act("delete", queue, id))

    def run_task(self, queue: str, id: str) -> None:
        """Move a scheduled, retry or archived task to pending now."""
        self._run(self._plans.act("run", queue, id))

    def archive_task(self, queue: str, id: str) -> None:
        """Archive a pending, scheduled or retry task. Releases its uniqueness lock."""
        self._run(self._plans.act("archive", queue, id))

    def delete_all(self, queue: str, state: TaskState | str) -> int:
        """Delete every pending, scheduled, retry, archived or completed task (1000 per script
        call); returns how many."""
        return self._run(self._plans.act_all("delete", queue, state))

    def run_all(self, queue: str, state: TaskState | str) -> int:
        """Move every scheduled, retry or archived task to pending (1000 per script call)."""
        return self._run(self._plans.act_all("run", queue, state))

    def archive_all(self, queue: str, state: TaskState | str) -> int:
        """Archive every pending, scheduled or retry task (1000 per script call)."""
        return self._run(self._plans.act_all("archive", queue, state))

    def remove_queue(self, queue: str, force: bool = False) -> None:
        """Remove a queue. It must be empty (QueueNotEmptyError); with ``force`` its tasks are
        deleted first, but none may be active (TaskStateError)."""
        self._run(self._plans.remove_queue(queue, force))

    def cancel(self, id: str, queue: str | None = None) -> TaskInfo:
        """Cancel a running task: it is archived with last_error 'cancelled by an operator' (never
        retried on its own; ``run_task`` runs it again) and its worker cancels the handler at once.
        ``queue`` None looks in every queue. Returns the task's info after the cancel. With a
        signing key, a task that does not verify is archived unsigned (last error "bad signature:
        ...; cancelled by an operator"), so running it again is refused by keyed workers."""
        return self._run(self._plans.cancel(id, queue))

    def stats(self, queue: str) -> QueueStats:
        """Counts per state and counters (kept for compatibility; see :meth:`queue_info`)."""
        return self._run(self._plans.stats(queue))

    def all_stats(self) -> list[QueueStats]:
        """:meth:`stats` of every queue (kept for compatibility; see :meth:`all_queue_info`)."""
        return self._run(self._plans.all_stats())

    # -- scheduler entries (periodic tasks; docs/periodic.md) ----------------------------------

    def set_workers(self, queue: str, id: str, workers: Sequence[str] | None) -> TaskInfo:
        """Change which workers (``Server(name=)``, ``asynqpy worker --name``) may run a targeted
        task (enqueued with ``workers=`` or ``runs=``); None = any worker. A run already taken by a
        worker no longer allowed is given back at that worker's next lease renewal (its handler is
        cancelled; the run is not counted). Returns the task as it now is. SignatureError for a task
        that does not verify with this Inspector's keys (nothing is written)."""
        return self._run(self._plans.set_workers(queue, id, workers))

    def edit_task(self, queue: str, id: str, **changes: Any) -> TaskInfo:
        """Change a pending, scheduled or retry task: ``payload``, ``max_retry``, its due time
        (``process_at``: a datetime or Unix seconds; ``process_in``: seconds, 0 = now). Due later,
        a pending task becomes scheduled; due now, a scheduled or retry task becomes pending.
        Returns the task as it now is. TaskStateError for an active, completed or archived task;
        InvalidArgumentError for a bad value, a unique task's payload, or a signed task when this
        Inspector has no signing key (with one, the edited message is signed again); SignatureError
        for a task that does not verify with this Inspector's keys (never signed again: delete or
        archive it)."""
        return self._run(self._plans.edit(queue, id, changes))

    def scheduler_entries(self, queue: str | None = None) -> list[cron.EntryInfo]:
        """Every scheduler entry (of ``queue``, or of every queue): its schedule, whether it is
        paused, its last and next tick, the last task it enqueued and its recent history."""
        return self._run(cron.entries_plan(queue, self.broker.clock.now_ms(), signer=self.broker.signer))

    def cron_add(self, name: str, task_type: str, payload: Any = None, *, cron: str | None = None,
                 every: float | None = None, tz: str = "UTC", queue: str = "default", missed: str = "skip",
                 **options: Any) -> cron.Entry:
        """Store (or replace) an entry; running schedulers pick it up at their next reload. Its
        arguments as for :meth:`asynqpy.Scheduler.register`. Signed with this Inspector's first
        signing key, if it has one: schedulers with keys fire only entries that verify."""
        e = _cron.make_entry(name, task_type, payload, cron=cron, every=every, tz=tz, queue=queue, missed=missed,
                             created_ms=self.broker.clock.now_ms(), **options)
        self._run(_cron.add_plan(e, self.broker.signer))
        return e

    def cron_remove(self, name: str, queue: str = "default") -> None:
        """Forget an entry (EntryNotFoundError if there is none); tasks it enqueued stay."""
        self._run(_cron.remove_plan(self.broker, queue, name))

    def cron_pause(self, name: str, queue: str = "default") -> None:
        """Pause an entry: no tick fires until :meth:`cron_resume` (ticks in between never do)."""
        self._run(_cron.pause_plan(self.broker, queue, name, True))

    def cron_resume(self, name: str, queue: str = "default") -> None:
        """Resume a paused entry from its next tick."""
        self._run(_cron.pause_plan(self.broker, queue, name, False))

    def cron_run_now(self, name: str, queue: str = "default") -> str:
        """Enqueue an entry's task now, outside its schedule; returns the task's id. With a signing
        key, an entry that does not verify is refused (SignatureError): its task would be signed."""
        return self._run(_cron.run_now_plan(self.broker, queue, name, self.broker.clock.now_ms()))

    def close(self) -> None:
        """Give the connection back to the pool; close the Redis client if this made it."""
        self._exec.close()
        if self._owns:
            self.redis.close()

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AsyncInspector:
    """The asyncio twin of :class:`Inspector`: the same methods, awaited."""

    def __init__(self, redis: Any = None, *, clock: Clock | None = None,
                 signing_key: SigningKeys | None = None) -> None:
        self.redis = async_client(redis)
        self._owns = redis is None or isinstance(redis, str)
        self.broker = Broker(clock, make_signer(signing_key))
        self._exec = AsyncExecutor(self.redis)
        self._plans = Plans(self.broker)

    async def _run(self, plan: Plan[T]) -> T:
        return await arun_plan(self._exec, plan)

    async def queues(self) -> list[str]:
        """See :meth:`Inspector.queues`."""
        return await self._run(self._plans.queues())

    async def queue_info(self, queue: str) -> QueueInfo:
        """See :meth:`Inspector.queue_info`."""
        return await self._run(self._plans.queue_info(queue))

    async def all_queue_info(self, memory: bool = True) -> list[QueueInfo]:
        """See :meth:`Inspector.all_queue_info`."""
        return await self._run(self._plans.all_queue_info(memory))

    async def history(self, queue: str, days: int = 7) -> list[DailyStats]:
        """See :meth:`Inspector.history`."""
        return await self._run(self._plans.history(queue, days))

    async def list_tasks(self, queue: str, state: TaskState | str, page: int = 1,
                         page_size: int = 30, group: str = "") -> list[TaskInfo]:
        """See :meth:`Inspector.list_tasks`."""
        return await self._run(self._plans.list_tasks(queue, state, page, page_size, group))

    async def groups(self, queue: str) -> list[GroupInfo]:
        """See :meth:`Inspector.groups`."""
        return await self._run(self._plans.groups(queue))

    async def events(self, queue: str, *, since: datetime | float | str | None = None,
                     follow: bool = False) -> AsyncIterator[TaskEvent]:
        """See :meth:`Inspector.events` (``async for event in inspector.events(...)``)."""
        reader = ev.Reader(queue, since, follow, block_ms=_block_ms(self.redis))
        while not reader.done:
            for event in reader.feed(await self._exec.run(reader.call())):
                yield event

    async def set_limits(self, queue: str, *, concurrency: int | None = None, rate: float | str | None = None,
                         burst: int | None = None) -> QueueLimits:
        """See :meth:`Inspector.set_limits`."""
        for r in await self._exec.run_many(_limits.set_calls(queue, concurrency, rate, burst)):
            if isinstance(r, Exception):
                raise r
        return await self.limits(queue)

    async def clear_limits(self, queue: str) -> None:
        """See :meth:`Inspector.clear_limits`."""
        await self._exec.run(_limits.clear_call(queue))

    async def limits(self, queue: str) -> QueueLimits:
        """See :meth:`Inspector.limits`."""
        return await self._exec.run(_limits.get_call(queue))

    async def set_events(self, queue: str, max_len: int) -> None:
        """See :meth:`Inspector.set_events`."""
        await self._exec.run(ev.set_cap(queue, max_len))
        if max_len == 0:
            await self.redis.delete(queue_keys(queue).events)

    async def events_max_len(self, queue: str) -> int:
        """See :meth:`Inspector.events_max_len`."""
        return await self._exec.run(ev.get_cap(queue))

    async def task_info(self, queue: str, id: str) -> TaskInfo:
        """See :meth:`Inspector.task_info`."""
        return await self._run(self._plans.task_info(queue, id))

    async def workflow(self, queue: str, id: str, limit: int = 1000) -> list[WorkflowNode]:
        """See :meth:`Inspector.workflow`."""
        return await self._run(flows.tree(queue, id, limit))

    async def process(self, queue: str, process_id: str, first: int = 0, count: int = 20) -> Process:
        """See :meth:`Inspector.process`."""
        return await self._run(processes.read(self._plans.b, queue, process_id, first, count, True))

    async def processes(self, queue: str, start: int = 0, count: int = 100,
                        status: str | None = None) -> tuple[int, list[Process]]:
        """See :meth:`Inspector.processes`."""
        return await self._run(processes.listing(self._plans.b, queue, start, count, status))

    async def stop_server(self, server_id: str, timeout: float = 10.0) -> str:
        """See :meth:`Inspector.stop_server`."""
        return await self._control(server_id, "stop", timeout)

    async def quiet_server(self, server_id: str, timeout: float = 10.0) -> str:
        """See :meth:`Inspector.quiet_server`."""
        return await self._control(server_id, "quiet", timeout)

    async def resume_server(self, server_id: str, timeout: float = 10.0) -> str:
        """See :meth:`Inspector.resume_server`."""
        return await self._control(server_id, "resume", timeout)

    async def _control(self, server_id: str, action: str, timeout: float) -> str:
        cid = await self._run(control.send(self._plans.b, server_id, action))
        key, deadline = control_ack(cid), time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"server {server_id} did not acknowledge {action} within {timeout:g}s")
            got = await self._exec.run(Call(lambda r: r, command=("BLPOP", key, max(0.01, min(1.0, left)))))
            if got:
                return str(got[1].decode() if isinstance(got[1], bytes) else got[1])

    async def pause(self, queue: str) -> bool:
        """See :meth:`Inspector.pause`."""
        return await self._run(self._plans.pause(queue))

    async def unpause(self, queue: str) -> bool:
        """See :meth:`Inspector.unpause`."""
        return await self._run(self._plans.unpause(queue))

    async def servers(self) -> list[ServerInfo]:
        """See :meth:`Inspector.servers`."""
        return await self._run(self._plans.servers())

    async def delete_task(self, queue: str, id: str) -> None:
        """See :meth:`Inspector.delete_task`."""
        await self._run(self._plans.act("delete", queue, id))

    async def run_task(self, queue: str, id: str) -> None:
        """See :meth:`Inspector.run_task`."""
        await self._run(self._plans.act("run", queue, id))

    async def archive_task(self, queue: str, id: str) -> None:
        """See :meth:`Inspector.archive_task`."""
        await self._run(self._plans.act("archive", queue, id))

    async def delete_all(self, queue: str, state: TaskState | str) -> int:
        """See :meth:`Inspector.delete_all`."""
        return await self._run(self._plans.act_all("delete", queue, state))

    async def run_all(self, queue: str, state: TaskState | str) -> int:
        """See :meth:`Inspector.run_all`."""
        return await self._run(self._plans.act_all("run", queue, state))

    async def archive_all(self, queue: str, state: TaskState | str) -> int:
        """See :meth:`Inspector.archive_all`."""
        return await self._run(self._plans.act_all("archive", queue, state))

    async def remove_queue(self, queue: str, force: bool = False) -> None:
        """See :meth:`Inspector.remove_queue`."""
        await self._run(self._plans.remove_queue(queue, force))

    async def cancel(self, id: str, queue: str | None = None) -> TaskInfo:
        """See :meth:`Inspector.cancel`."""
        return await self._run(self._plans.cancel(id, queue))

    async def stats(self, queue: str) -> QueueStats:
        """See :meth:`Inspector.stats`."""
        return await self._run(self._plans.stats(queue))

    async def all_stats(self) -> list[QueueStats]:
        """See :meth:`Inspector.all_stats`."""
        return await self._run(self._plans.all_stats())

    # -- scheduler entries (periodic tasks; docs/periodic.md) ----------------------------------

    async def set_workers(self, queue: str, id: str, workers: Sequence[str] | None) -> TaskInfo:
        """Change which workers (``Server(name=)``, ``asynqpy worker --name``) may run a targeted
        task (enqueued with ``workers=`` or ``runs=``); None = any worker. A run already taken by a
        worker no longer allowed is given back at that worker's next lease renewal (its handler is
        cancelled; the run is not counted). Returns the task as it now is. SignatureError for a task
        that does not verify with this Inspector's keys (nothing is written)."""
        return await self._run(self._plans.set_workers(queue, id, workers))

    async def edit_task(self, queue: str, id: str, **changes: Any) -> TaskInfo:
        """Change a pending, scheduled or retry task: ``payload``, ``max_retry``, its due time
        (``process_at``: a datetime or Unix seconds; ``process_in``: seconds, 0 = now). Due later,
        a pending task becomes scheduled; due now, a scheduled or retry task becomes pending.
        Returns the task as it now is. TaskStateError for an active, completed or archived task;
        InvalidArgumentError for a bad value, a unique task's payload, or a signed task when this
        Inspector has no signing key (with one, the edited message is signed again); SignatureError
        for a task that does not verify with this Inspector's keys (never signed again: delete or
        archive it)."""
        return await self._run(self._plans.edit(queue, id, changes))

    async def scheduler_entries(self, queue: str | None = None) -> list[cron.EntryInfo]:
        """Every scheduler entry (of ``queue``, or of every queue): its schedule, whether it is
        paused, its last and next tick, the last task it enqueued and its recent history."""
        return await self._run(cron.entries_plan(queue, self.broker.clock.now_ms(), signer=self.broker.signer))

    async def cron_add(self, name: str, task_type: str, payload: Any = None, *, cron: str | None = None,
                 every: float | None = None, tz: str = "UTC", queue: str = "default", missed: str = "skip",
                 **options: Any) -> cron.Entry:
        """Store (or replace) an entry; running schedulers pick it up at their next reload. Its
        arguments as for :meth:`asynqpy.Scheduler.register`. Signed with this Inspector's first
        signing key, if it has one: schedulers with keys fire only entries that verify."""
        e = _cron.make_entry(name, task_type, payload, cron=cron, every=every, tz=tz, queue=queue, missed=missed,
                             created_ms=self.broker.clock.now_ms(), **options)
        await self._run(_cron.add_plan(e, self.broker.signer))
        return e

    async def cron_remove(self, name: str, queue: str = "default") -> None:
        """Forget an entry (EntryNotFoundError if there is none); tasks it enqueued stay."""
        await self._run(_cron.remove_plan(self.broker, queue, name))

    async def cron_pause(self, name: str, queue: str = "default") -> None:
        """Pause an entry: no tick fires until :meth:`cron_resume` (ticks in between never do)."""
        await self._run(_cron.pause_plan(self.broker, queue, name, True))

    async def cron_resume(self, name: str, queue: str = "default") -> None:
        """Resume a paused entry from its next tick."""
        await self._run(_cron.pause_plan(self.broker, queue, name, False))

    async def cron_run_now(self, name: str, queue: str = "default") -> str:
        """Enqueue an entry's task now, outside its schedule; returns the task's id. With a signing
        key, an entry that does not verify is refused (SignatureError): its task would be signed."""
        return await self._run(_cron.run_now_plan(self.broker, queue, name, self.broker.clock.now_ms()))

    async def close(self) -> None:
        """Close the Redis client if this inspector made it."""
        if self._owns:
            await self.redis.aclose()

    async def __aenter__(self) -> AsyncInspector:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


def _block_ms(redis: Any) -> int:
    """How long a following read blocks: 5 s, or less than the client's socket timeout."""
    return int(max(0.05, min(5.0, read_timeout(redis) - 0.5)) * 1000)
