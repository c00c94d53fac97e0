"""What Inspector and AsyncInspector do, written once (sans-I/O): :class:`InspectorPlans`.

Each public method is a plan (:mod:`asynqpy.core.spine.twin`), mostly one of
:class:`~asynqpy.core.inspector.inspection.Plans`; :class:`~asynqpy.inspector.Inspector` runs its steps
synchronously, :class:`~asynqpy.inspector.AsyncInspector` awaits them. A step is a list of calls
(one pipelined round trip; each reply the value or the exception its call raised) or one
:class:`~asynqpy.core.spine.broker.Call` (its value, raising its error).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TypeVar

from ..cron import entries as _cron
from ..cron import entries as cron
from ..deploy import holds as _holds
from ..limits import plans as _limits
from ..limits.plans import QueueLimits
from ..model.clock import Clock
from ..model.errors import InvalidArgumentError
from ..model.options import validate_tenant
from ..model.task import TaskInfo, TaskState
from ..offload import refs
from ..processes import plans as processes
from ..processes.model import Process
from ..results import events as ev
from ..results.tasklogs import LogLine
from ..security.encryption import check_ring
from ..security.keyplans import ForgetReport, forget_plan, reveal_logs_plan, reveal_plan, sweep_plan
from ..security.rotation import RotationReport, rotate_plan
from ..security.signing import SigningKeys, make_signer
from ..server import control
from ..server.record import ServerInfo
from ..spine import queue_settings as _settings
from ..spine.broker import Broker, Call, QueueStats
from ..spine.keys import control_ack, queue_keys, validate_queue
from ..spine.queue_settings import QueueSettingPlans
from ..spine.twin import Steps, planned
from ..tenants import plans as _tenants
from ..tenants.plans import TenantInfo
from ..workflows import plans as flows
from ..workflows.plans import WorkflowNode
from . import search as _search
from .inspection import DailyStats, GroupInfo, Plans, QueueInfo

_T = TypeVar("_T")


class InspectorPlans(QueueSettingPlans):
    """The inspector's logic, shared by :class:`~asynqpy.Inspector` and
    :class:`~asynqpy.AsyncInspector` (each adds its connection and how it runs a step)."""

    def __init__(self, clock: Clock | None, signing_key: SigningKeys | None, encryption: Any = None,
                 offload: Any = None) -> None:
        self.broker = Broker(clock, make_signer(signing_key), check_ring(encryption))
        self._plans = Plans(self.broker)
        self.offload = offload  # a blob store: offloaded payloads are shown read from it (docs/offload.md)

    def _answer(self, plan: Steps[_T]) -> Steps[_T]:
        """What a method answers: its tasks' offloaded payloads read from the blob store first (shown
        as :class:`~asynqpy.core.offload.refs.Offloaded` without one: docs/offload.md), then its
        encrypted values decrypted with the key ring, or shown as
        :class:`~asynqpy.core.security.encryption.Encrypted` (no ring, no key: docs/encryption.md)."""
        value = refs.reveal(self.offload, (yield from plan))
        return (yield from reveal_plan(self.broker.ring, value))  # type: ignore[no-any-return]

    @planned
    def queues(self) -> Steps[list[str]]:
        """Names of every known queue, sorted."""
        return self._plans.queues()

    @planned
    def queue_info(self, queue: str) -> Steps[QueueInfo]:
        """Counts per state, paused, latency, counters, memory: one round trip, O(1) in Redis."""
        return self._plans.queue_info(queue)

    @planned
    def all_queue_info(self, memory: bool = True) -> Steps[list[QueueInfo]]:
        """:meth:`queue_info` of every queue (one pipelined round trip after the queue list).
        ``memory`` False: without the sampled memory reading (``memory_bytes`` None), about a
        fifth of the work."""
        return self._plans.all_queue_info(memory)

    @planned
    def history(self, queue: str, days: int = 7) -> Steps[list[DailyStats]]:
        """Processed/failed per UTC day, newest first (today included), ``days`` from 1 to 90."""
        return self._plans.history(queue, days)

    @planned
    def list_tasks(self, queue: str, state: TaskState | str, page: int = 1, page_size: int = 30,
                   group: str = "") -> Steps[list[TaskInfo]]:
        """One page (1-based, at most 1000 tasks) of the tasks in ``state``. Order: pending oldest
        first (the order they run in); active, scheduled and retry by lease expiry / due time;
        archived and completed newest first; aggregating (give the ``group``) oldest first. A page
        starting past position 10**15 is an InvalidArgumentError."""
        return self._plans.list_tasks(queue, state, page, page_size, group)

    @planned
    def all_history(self, days: int = 7) -> Steps[dict[str, list[DailyStats]]]:
        """:meth:`history` of every queue, by queue name (two round trips whatever the number of
        queues)."""
        return self._plans.all_history(days)

    @planned
    def find_tasks(self, queue: str, *, id_prefix: str = "", task_type: str = "", cursor: int = 0,
                   limit: int = 30) -> Steps[tuple[int, list[TaskInfo]]]:
        """Search a queue's tasks, of every state, by id prefix and/or exact type. Bounded work
        per call (about 10 000 tasks looked at): returns ``(cursor, tasks)``; it stops once
        ``limit`` tasks (1 to 1000) matched, returning every match of the last batch it read (up
        to about 500 more); call again with the cursor to go on, until it is 0. The tasks come in
        the hash's order, without their due or archive time (:meth:`task_info` has them)."""
        return self._plans.find_tasks(queue, id_prefix, task_type, cursor, limit)

    @planned
    def search_page(self, /, queue: str, *, cursor: int = 0, limit: int = 50, budget: int = _search.BUDGET,
                    pages: int = 10, **conditions: Any) -> Steps[_search.SearchPage]:
        """One page of :meth:`~asynqpy.Inspector.search` (its ``conditions``): the matches of
        bounded steps from ``cursor`` (each about ``budget`` tasks looked at in Redis), until one
        ends with ``limit`` matches or after ``pages`` steps: every match of the steps read (so
        possibly more than ``limit``: a cursor cannot resume inside a step), the cursor to go on
        from (0: the end) and the progress. For a console or a job that resumes a search later."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidArgumentError(f"limit must be an int >= 1, got {limit!r}")
        if isinstance(pages, bool) or not isinstance(pages, int) or pages < 1:
            raise InvalidArgumentError(f"pages must be an int >= 1, got {pages!r}")
        scan = _search.Scan(queue, _search.make_search(**conditions), cursor, None, budget, ring=self.broker.ring)
        tasks = refs.reveal(self.offload, (yield from _search.scan_plan(scan, self._plans._now(), pages, limit)))
        return _search.SearchPage(tasks, scan.cursor, min(scan.looked, scan.total or 0), scan.total or 0)

    @planned
    def search_count(self, /, queue: str, *, budget: int = _search.BUDGET, **conditions: Any) -> Steps[int]:
        """How many of the queue's tasks match :meth:`~asynqpy.Inspector.search`'s ``conditions``
        (the whole queue read in bounded steps; only the count comes back)."""
        scan = _search.Scan(queue, _search.make_search(**conditions), budget=budget, count_only=True,
                            ring=self.broker.ring)
        yield from _search.scan_plan(scan, self._plans._now())
        return scan.matched

    @planned
    def search_act(self, /, queue: str, action: str, **conditions: Any) -> Steps[_search.ActionReport]:
        """Apply ``action`` (retry, run, archive, delete, cancel: :data:`~asynqpy.core.inspector.search.ACTIONS`)
        to every task matching :meth:`~asynqpy.Inspector.search`'s ``conditions``: the matches
        are found first, then each goes through the action of its own (:meth:`run_task`,
        :meth:`archive_task`, :meth:`delete_task`, :meth:`cancel`), so a task that changed
        meanwhile is refused, not acted on blindly. Tasks in a state the action does not apply to
        are counted as skipped."""
        _search.check_action(action)
        scan = _search.Scan(queue, _search.make_search(**conditions), ring=self.broker.ring)
        tasks = yield from _search.scan_plan(scan, self._plans._now())
        return (yield from _search.act_plan(self._plans, queue, action, tasks))

    @planned
    def groups(self, queue: str) -> Steps[list[GroupInfo]]:
        """The queue's aggregation groups: name, size, when the oldest and newest task joined."""
        return self._plans.groups(queue)

    @planned
    def set_limits(self, queue: str, *, concurrency: int | None = None, rate: float | str | None = None,
                   burst: int | None = None) -> Steps[QueueLimits]:
        """Limit the queue across every worker: at most ``concurrency`` of its tasks active at once;
        at most ``rate`` starts per second (a number, or text such as "100/s", "30/m") with
        bursts of up to ``burst`` (default 1: evenly spaced). Limits not given stay as they are;
        they hold from the next dequeue of any worker. Returns the limits now in force."""
        for r in (yield _limits.set_calls(queue, concurrency, rate, burst)):
            if isinstance(r, Exception):
                raise r
        return (yield _limits.get_call(queue))  # type: ignore[no-any-return]

    @planned
    def clear_limits(self, queue: str) -> Steps[None]:
        """Remove every limit of the queue."""
        for r in (yield _limits.clear_calls(queue)):
            if isinstance(r, Exception):
                raise r

    @planned
    def limits(self, queue: str) -> Steps[QueueLimits]:
        """The queue's limits (None where there is none)."""
        return (yield _limits.get_call(queue))  # type: ignore[no-any-return]

    @planned
    def tenants(self, queue: str, *, after: str = "", count: int = 100) -> Steps[list[TenantInfo]]:
        """A page of the queue's tenants that have pending tasks, in name order (``count`` at
        most; the next page: ``after=`` the last one's name): each with its pending tasks, its
        weight, whether it is paused, and whether it is taking turns now (docs/tenants.md)."""
        return (yield _tenants.page_call(queue, after, count))  # type: ignore[no-any-return]

    @planned
    def set_tenant(self, /, queue: str, tenant: str, *, weight: int | None = None, paused: bool | None = None,
                   concurrency: int | None = None, rate: float | str | None = None,
                   burst: int | None = None, **settings: Any) -> Steps[TenantInfo]:
        """Change one tenant's settings in a queue (None: unchanged), from its next turn on:
        ``weight`` 1..100 (a tenant of weight 3 gets three turns to one of weight 1 while both
        have work), ``paused`` (its pending tasks wait, in order, until it is resumed; the
        others go on), ``concurrency`` (at most this many of its tasks active at once across
        every worker; 0 = no limit; a worker killed while running one holds its slot until its
        lease expires), ``rate`` (at most this many of its tasks start a second, across every
        worker: a number or text such as "50/s", "300/m"; 0 = no limit) with bursts of up to
        ``burst`` (default 1: evenly spaced). Kept in Redis while they differ from the defaults.
        Returns the tenant. ``settings``: the tenant's own value of the per-tenant queue settings
        (core/spine/queue_settings.py), by their setters' keywords (left out: unchanged):"""
        call = _tenants.set_call(queue, tenant, weight, paused, concurrency=concurrency, rate=rate, burst=burst)
        for step in _settings.tenant_calls(queue, tenant, settings):  # noqa: UP028 (validated before any is sent)
            yield step
        return (yield call)  # type: ignore[no-any-return]

    @planned
    def set_tenant_defaults(self, queue: str, *, weight: int | None = None, concurrency: int | None = None,
                            rate: float | str | None = None, burst: int | None = None) -> Steps[TenantInfo]:
        """The queue's defaults for every tenant without settings of its own (None: unchanged):
        ``weight`` 1..100, ``concurrency`` (0 = no limit) and ``rate``/``burst`` (as
        :meth:`set_tenant`; each tenant has its own bucket). They act at each tenant's next turn
        or task end, never by a scan of the tenants. Returns them (as a ``TenantInfo`` named '')."""
        return (yield _tenants.defaults_call(queue, weight, concurrency,  # type: ignore[no-any-return]
                                             rate=rate, burst=burst))

    @planned
    def clear_tenant_defaults(self, queue: str) -> Steps[TenantInfo]:
        """Remove the queue's defaults for its tenants (weight 1, no limit)."""
        return (yield _tenants.defaults_call(queue, clear=True))  # type: ignore[no-any-return]

    @planned
    def pause_tenant(self, queue: str, tenant: str) -> Steps[TenantInfo]:
        """Hold one tenant's pending tasks back (the queue's other tenants go on)."""
        return (yield _tenants.set_call(queue, tenant, paused=True))  # type: ignore[no-any-return]

    @planned
    def resume_tenant(self, queue: str, tenant: str) -> Steps[TenantInfo]:
        """Let a paused tenant's tasks be taken again (it takes turns from the next dequeue)."""
        return (yield _tenants.set_call(queue, tenant, paused=False))  # type: ignore[no-any-return]

    @planned
    def clear_tenant(self, queue: str, tenant: str) -> Steps[TenantInfo]:
        """Put a tenant back to the defaults (weight 1, running, no limit): nothing is kept for it."""
        return (yield _tenants.set_call(queue, tenant, clear=True))  # type: ignore[no-any-return]

    @planned
    def set_events(self, queue: str, max_len: int, active: bool | None = None) -> Steps[None]:
        """Keep about ``max_len`` events in the queue's stream (default 10 000); 0 turns the stream
        off (no event is written; the kept ones are deleted). ``active``: True = write ``active``
        events always, False = only while a reader follows the stream (the default), None = as
        it was."""
        yield ev.set_cap(queue, max_len)
        if active is not None:
            yield ev.set_active(queue, active)
        if max_len == 0:
            yield [Call(lambda r: r, command=("DEL", queue_keys(queue).events)),
                   Call(lambda r: r, command=("HDEL", queue_keys(queue).conf, "kept"))]  # (its count of events)

    @planned
    def events_max_len(self, queue: str) -> Steps[int]:
        """The queue's stream cap (0 = off)."""
        return (yield ev.get_cap(queue))  # type: ignore[no-any-return]

    @planned
    def events_active(self, queue: str) -> Steps[bool]:
        """Whether the queue writes ``active`` events always (False: only while a reader follows
        its stream)."""
        return (yield ev.get_active(queue))  # type: ignore[no-any-return]

    @planned
    def task_info(self, queue: str, id: str, *, verified: bool = False) -> Steps[TaskInfo]:
        """One task's info. ``verified=True``: only if its message verifies with this Inspector's
        keys (the trust gate; what a copy of it that is signed anew needs, as the web console's
        duplicate): SignatureError for one that does not (a forged or tampered task),
        InvalidArgumentError for a signed task when this Inspector has no key."""
        return self._plans.task_info(queue, id, verified)

    @planned
    def task_logs(self, queue: str, id: str) -> Steps[list[LogLine]]:
        """The logs of task ``id`` (``task.log``, and the logging records a server with
        ``capture_logs`` kept), oldest first, each a :class:`~asynqpy.core.results.tasklogs.LogLine`
        (``attempt``, ``at``, ``text``): the lines of the attempts that ended by storing the task
        again (retried, archived, completed with a retention); docs/tasks.md "Task logs".
        TaskNotFoundError for a task that is not there (its logs went with it)."""
        lines = yield from self._plans.task_logs(queue, id)
        return (yield from reveal_logs_plan(self.broker.ring, lines, queue))

    @planned
    def workflow(self, queue: str, id: str, limit: int = 1000) -> Steps[list[WorkflowNode]]:
        """The workflow task ``id`` belongs to (``after=``, ``chain``, ``group``), as trees: its
        roots (the ancestors waiting on nothing) with, under each task, the tasks registered as
        waiting on it and their state; at most ``limit`` tasks. A task with neither parents nor
        children is its own one-node tree."""
        return flows.tree(queue, id, limit)

    @planned
    def process(self, queue: str, process_id: str, first: int = 0, count: int = 20) -> Steps[Process]:
        """A durable process (docs/processes.md): its status, state, timer and ``count`` events of
        its history from event ``first`` (1-based; 0: its latest ``count``). Raises
        ProcessNotFoundError."""
        return processes.read(self._plans.b, queue, process_id, first, count, True)

    @planned
    def processes(self, queue: str, start: int = 0, count: int = 100,
                  status: str | None = None) -> Steps[tuple[int, list[Process]]]:
        """(how many processes ``queue`` has, ``count`` of them from rank ``start``, the most
        recently changed first; without their history). ``status`` ("starting", "running",
        "error"): only the processes in it, and how many there are (this reads every record of
        the queue: O(processes), for an operator looking for the broken ones)."""
        return processes.listing(self._plans.b, queue, start, count, status)

    @planned
    def stop_server(self, server_id: str, timeout: float = 10.0) -> Steps[str]:
        """Stop a server gracefully, as SIGTERM does (its running tasks finish within its
        shutdown_timeout, or go back to their queues), from any machine. Returns the server's
        acknowledgement ("stopping"). ServerNotFoundError for a server that is not alive;
        TimeoutError if it did not acknowledge within ``timeout`` seconds."""
        return self._control(server_id, "stop", timeout)

    @planned
    def quiet_server(self, server_id: str, timeout: float = 10.0) -> Steps[str]:
        """Make a server take no new task (its running ones finish): before a deploy. Returns
        "quiet" once no task will be taken. Errors as :meth:`stop_server`."""
        return self._control(server_id, "quiet", timeout)

    @planned
    def resume_server(self, server_id: str, timeout: float = 10.0) -> Steps[str]:
        """Make a quiet server take tasks again. Returns "running" ("stopping" if it is
        stopping). Errors as :meth:`stop_server`."""
        return self._control(server_id, "resume", timeout)

    @planned
    def scale_server(self, server_id: str, concurrency: int, timeout: float = 10.0) -> Steps[str]:
        """Resize a running server: it runs up to ``concurrency`` handlers at once from now on
        (more are fetched at once; fewer as its running tasks finish, none is stopped). Returns
        its acknowledgement, "concurrency N"; ``asynqpy server ls`` shows the new number. Not kept
        across a restart (the server's own option is). InvalidArgumentError for a number outside
        1..100 000; other errors as :meth:`stop_server`."""
        return self._control(server_id, control.concurrency_action(concurrency), timeout)

    def _control(self, server_id: str, action: str, timeout: float) -> Steps[str]:
        cid = yield from control.send(self.broker, server_id, action)
        key, deadline = control_ack(cid), time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"server {server_id} did not acknowledge {action} within {timeout:g}s")
            got = yield Call(lambda r: r, command=("BLPOP", key, max(0.01, min(1.0, left))))
            if got:
                return str(got[1].decode() if isinstance(got[1], bytes) else got[1])

    @planned
    def pause(self, queue: str) -> Steps[bool]:
        """Pause a queue (workers stop taking its tasks); False if it already was."""
        return self._plans.pause(queue)

    @planned
    def unpause(self, queue: str) -> Steps[bool]:
        """Unpause a queue; False if it was not paused."""
        return self._plans.unpause(queue)

    @planned
    def block_type(self, queue: str, task_type: str) -> Steps[list[str]]:
        """Block a task type in a queue while old and new workers overlap in a deploy: from the
        next dequeue, no worker runs its tasks; they are held (listed as scheduled, with
        ``TaskInfo.held`` "type") until :meth:`unblock_type`. Tasks of the type already running
        go on. Returns the queue's blocked types (docs/deploy.md)."""
        validate_queue(queue)
        t = _holds.check_type_name(task_type)
        return (yield _holds.hold_call(queue, "block", t)).blocked  # type: ignore[no-any-return]

    @planned
    def unblock_type(self, queue: str, task_type: str) -> Steps[int]:
        """Unblock a task type: its held tasks go back to the front of the queue's pending tasks,
        the oldest held first (any task held for a type no longer blocked, left by an unblock
        that was cut short, goes back too). Returns how many went back."""
        validate_queue(queue)
        t = _holds.check_type_name(task_type)
        moved = offset = in_pass = 0
        for call in range(10_000):
            r = yield _holds.hold_call(queue, "unblock", t if call == 0 else "", offset)
            moved, in_pass, offset = moved + r.moved, in_pass + r.moved, r.offset
            if not r.more:
                if offset == 0 or in_pass == 0:
                    break
                # tasks were skipped (still blocked) while others went: a task removed meanwhile
                # shifts the offset, so the band is read once more from its top
                offset = in_pass = 0
        return moved

    @planned
    def blocked_types(self, queue: str) -> Steps[list[str]]:
        """The task types blocked in a queue (:meth:`block_type`)."""
        validate_queue(queue)
        return (yield _holds.hold_call(queue, "list")).blocked  # type: ignore[no-any-return]

    @planned
    def servers(self) -> Steps[list[ServerInfo]]:
        """Live servers and the tasks each runs (as of its last heartbeat)."""
        return self._plans.servers()

    @planned
    def delete_task(self, queue: str, id: str) -> Steps[None]:
        """Delete a task that is not active (TaskStateError if it is: cancel it instead). Releases
        its uniqueness lock."""
        return self._plans.act("delete", queue, id)

    @planned
    def rotate_keys(self, *, restart: bool = False, max_pages: int | None = None) -> Steps[RotationReport]:
        """Re-encrypt what was sealed with an older key of the key ring with its newest key: every
        queue's tasks (payloads, results, logs) and tenant keys (docs/encryption.md "Rotation").
        Safe while workers run; resumable (the cursor is kept in Redis: a run goes on from where
        the last one stopped; ``restart``: from the start); ``max_pages``: stop after that many
        pages of a queue's tasks (``done`` False then). Needs the Inspector's ``encryption``; with
        its blob store (``offload=``), offloaded payloads are re-encrypted too, each into a new blob
        (docs/offload.md "With encryption")."""
        if self.broker.ring is None:
            raise InvalidArgumentError("rotate_keys needs the key ring: Inspector(..., encryption=KeyRing(...))")
        queues = yield from self._plans.queues()
        return (yield from rotate_plan(self.broker, queues, restart, max_pages, store=self.offload))

    @planned
    def forget_tenant(self, queue: str, tenant: str) -> Steps[ForgetReport]:
        """Erase a tenant: destroy its encryption key (``KeyRing(..., tenant_keys=True)``), so
        nothing sealed with it can be read again, write the audit event ``tenant_forgotten`` to
        the queue's event stream, and delete the tenant's tasks that are not active (queued,
        scheduled, retried, archived, kept). Its active tasks cannot be read any more: a worker
        archives them; forgetting again removes them."""
        report = ForgetReport()
        report.key = yield from forget_plan(self.broker.ring, validate_queue(queue), validate_tenant(tenant),
                                            self.broker.clock.now_ms())
        yield from sweep_plan(self._plans, queue, tenant, report)
        return report

    @planned
    def run_task(self, queue: str, id: str) -> Steps[None]:
        """Move a scheduled, retry or archived task to pending now."""
        return self._plans.act("run", queue, id)

    @planned
    def archive_task(self, queue: str, id: str) -> Steps[None]:
        """Archive a pending, scheduled or retry task. Releases its uniqueness lock."""
        return self._plans.act("archive", queue, id)

    @planned
    def delete_all(self, queue: str, state: TaskState | str) -> Steps[int]:
        """Delete every pending, scheduled, retry, archived or completed task (1000 per script
        call); returns how many."""
        return self._plans.act_all("delete", queue, state)

    @planned
    def run_all(self, queue: str, state: TaskState | str) -> Steps[int]:
        """Move every scheduled, retry or archived task to pending (1000 per script call)."""
        return self._plans.act_all("run", queue, state)

    @planned
    def archive_all(self, queue: str, state: TaskState | str) -> Steps[int]:
        """Archive every pending, scheduled or retry task (1000 per script call)."""
        return self._plans.act_all("archive", queue, state)

    @planned
    def remove_queue(self, queue: str, force: bool = False) -> Steps[None]:
        """Remove a queue. It must be empty (QueueNotEmptyError); with ``force`` its tasks are
        deleted first, but none may be active (TaskStateError)."""
        return self._plans.remove_queue(queue, force)

    @planned
    def cancel(self, id: str, queue: str | None = None) -> Steps[TaskInfo]:
        """Cancel a running task: it is archived with last_error 'cancelled by an operator' (never
        retried on its own; ``run_task`` runs it again) and its worker cancels the handler at once.
        ``queue`` None looks in every queue. Returns the task's info after the cancel. With a
        signing key, a task that does not verify is archived unsigned (last error "bad signature:
        ...; cancelled by an operator"), so running it again is refused by keyed workers."""
        return self._plans.cancel(id, queue)

    @planned
    def stats(self, queue: str) -> Steps[QueueStats]:
        """Counts per state and counters (kept for compatibility; see :meth:`queue_info`)."""
        return self._plans.stats(queue)

    @planned
    def all_stats(self) -> Steps[list[QueueStats]]:
        """:meth:`stats` of every queue (kept for compatibility; see :meth:`all_queue_info`)."""
        return self._plans.all_stats()

    # -- scheduler entries (periodic tasks; docs/cron.md) ----------------------------------

    @planned
    def set_workers(self, queue: str, id: str, workers: Sequence[str] | None) -> Steps[TaskInfo]:
        """Change which workers (``Server(name=)``, ``asynqpy worker --name``) may run a targeted
        task (enqueued with ``workers=`` or ``runs=``); None = any worker, for a task of ``runs`` > 1
        (a task of one run keeps naming workers: InvalidArgumentError, nothing changes). A run
        already taken by a worker no longer allowed is given back at that worker's next lease
        renewal (its handler is cancelled; the run is not counted). Returns the task as it now is.
        SignatureError for a task that does not verify with this Inspector's keys (nothing is
        written)."""
        return self._plans.set_workers(queue, id, workers)

    @planned
    def edit_task(self, /, queue: str, id: str, **changes: Any) -> Steps[TaskInfo]:
        """Change a pending, scheduled or retry task: ``payload``, ``max_retry``, its due time
        (``process_at``: a datetime or Unix seconds; ``process_in``: seconds, 0 = now). Due later,
        a pending task becomes scheduled; due now, a scheduled or retry task becomes pending.
        Returns the task as it now is. TaskStateError for an active, completed or archived task;
        InvalidArgumentError for a bad value, a unique task's payload, or a signed task when this
        Inspector has no signing key (with one, the edited message is signed again); SignatureError
        for a task that does not verify with this Inspector's keys (never signed again: delete or
        archive it)."""
        return self._plans.edit(queue, id, changes)

    @planned
    def scheduler_entries(self, queue: str | None = None) -> Steps[list[cron.EntryInfo]]:
        """Every scheduler entry (of ``queue``, or of every queue): its schedule, whether it is
        paused, its last and next tick, the last task it enqueued and its recent history."""
        return cron.entries_plan(queue, self.broker.clock.now_ms(), signer=self.broker.signer)

    @planned
    def cron_add(self, /, name: str, task_type: str, payload: Any = None, *, cron: str | None = None,
                 every: float | None = None, tz: str = "UTC", queue: str = "default", missed: str = "skip",
                 **options: Any) -> Steps[cron.Entry]:
        """Store (or replace) an entry; running schedulers pick it up at their next reload. Its
        arguments as for :meth:`asynqpy.Scheduler.register`. Signed with this Inspector's first
        signing key, if it has one: schedulers with keys fire only entries that verify."""
        e = _cron.make_entry(name, task_type, payload, cron=cron, every=every, tz=tz, queue=queue, missed=missed,
                             created_ms=self.broker.clock.now_ms(), **options)
        yield from _cron.add_plan(e, self.broker.signer)
        return e

    @planned
    def cron_remove(self, name: str, queue: str = "default") -> Steps[None]:
        """Forget an entry (EntryNotFoundError if there is none); tasks it enqueued stay."""
        return _cron.remove_plan(self.broker, queue, name)

    @planned
    def cron_pause(self, name: str, queue: str = "default") -> Steps[None]:
        """Pause an entry: no tick fires until :meth:`cron_resume` (ticks in between never do)."""
        return _cron.pause_plan(self.broker, queue, name, True)

    @planned
    def cron_resume(self, name: str, queue: str = "default") -> Steps[None]:
        """Resume a paused entry from its next tick."""
        return _cron.pause_plan(self.broker, queue, name, False)

    @planned
    def cron_run_now(self, name: str, queue: str = "default") -> Steps[str]:
        """Enqueue an entry's task now, outside its schedule; returns the task's id. With a signing
        key, an entry that does not verify is refused (SignatureError): its task would be signed."""
        return _cron.run_now_plan(self.broker, queue, name, self.broker.clock.now_ms())


InspectorPlans.set_tenant.__doc__ = (InspectorPlans.set_tenant.__doc__ or "") + _settings.tenant_doc(" " * 8)
