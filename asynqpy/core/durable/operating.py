"""The operator's side of durable runs, written once as plans (sans I/O, :mod:`asynqpy.core.spine.twin`):
the Inspector's listing of runs (by state and function, paged) and a run with its timeline
(:class:`DurableInspectorPlans`), and the clients' ``resume`` and bulk resume
(:class:`DurableOpsPlans`). docs/durable.md "Operating runs".
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..client.plans import ClientPlans
from ..inspector.inspection import MAX_OFFSET, Plan
from ..model.errors import InvalidArgumentError
from ..processes import plans as processes
from ..processes.model import ERROR, Process, key_of, parse_record, validate_id
from ..spine.broker import Broker, Call
from ..spine.keys import CANCEL_CHANNEL, queue_keys
from ..spine.stored import is_active, token_of
from ..spine.twin import Steps, planned
from . import cancelling
from .function import process_type
from .life import RESUME
from .plans import DurablePlans, _run_of
from .replay import FAILED, MAX_HISTORY, TYPE_PREFIX, DurableRun
from .timeline import RESUMABLE, RunInfo, info, is_run, state_of, validate_state

MAX_PAGE = 1000


def _ok(v: Any) -> Any:
    if isinstance(v, Exception):
        raise v
    return v


def listing(queue: str, state: str | None = None, function: str | None = None, start: int = 0,
            count: int = 100) -> Plan[tuple[int, list[RunInfo]]]:
    """(how many runs of ``queue`` match, the page from rank ``start`` of them, the most recently
    changed first): runs in ``state`` (None: any), of ``function`` (its name; None: any). Reads
    every process record of the queue (HSCAN, a thousand at a time: O(processes))."""
    validate_state(state)
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= MAX_OFFSET:
        raise InvalidArgumentError(f"start must be an int from 0 to {MAX_OFFSET}, got {start!r}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PAGE:
        raise InvalidArgumentError(f"count must be an int from 1 to {MAX_PAGE}, got {count!r}")
    want_type = process_type(function) if function is not None else None
    found = [p for p in (yield from _runs(queue, MAX_SCAN))
             if (want_type is None or p.type == want_type) and (state is None or state_of(p) == state)]
    found.sort(key=lambda p: (p.updated is not None, p.updated), reverse=True)
    shown = yield from processes.failing(queue, found[start:start + count])
    return len(found), [info(p) for p in shown]


MAX_SCAN = 10**9
"""(A listing reads every record.)"""


def _runs(queue: str, limit: int) -> Plan[list[Process]]:
    """The runs among the first ``limit`` process records of ``queue`` (HSCAN, a thousand at a time)."""
    key = queue_keys(queue).proc
    cursor, found, seen = "0", [], 0
    while seen < limit:
        page = _ok((yield [Call(lambda r: r, command=("HSCAN", key, cursor, "COUNT", 1000))])[0])
        flat = page[1]
        pairs = list(flat.items()) if isinstance(flat, dict) else list(zip(flat[::2], flat[1::2]))
        seen += len(pairs)
        for pid, raw in pairs:
            rec = parse_record(pid.decode(errors="surrogateescape"), raw)
            if is_run(rec.fields[0].decode(errors="replace")):
                found.append(rec.view((), queue))
        cursor = page[0].decode() if isinstance(page[0], bytes) else str(page[0])
        if cursor == "0":
            break
    return found


def counts(queue: str, scan: int = 10_000) -> Plan[dict[str, dict[str, int]]]:
    """How many runs of ``queue`` each function has in each state, among the first ``scan``
    process records (a bounded read for a metrics scrape)."""
    if isinstance(scan, bool) or not isinstance(scan, int) or scan < 1:
        raise InvalidArgumentError(f"scan must be an int >= 1, got {scan!r}")
    out: dict[str, dict[str, int]] = {}
    for p in (yield from _runs(queue, scan)):
        by_state = out.setdefault(p.type[len(TYPE_PREFIX):], {})
        by_state[state_of(p)] = by_state.get(state_of(p), 0) + 1
    return out


def read(b: Broker, queue: str, run_id: str) -> Plan[RunInfo]:
    """Run ``run_id`` of ``queue`` with its timeline (its whole history: at most MAX_HISTORY
    events). ProcessNotFoundError if there is none; InvalidArgumentError for a process that is
    not a run."""
    p = yield from processes.read(b, queue, validate_id(run_id), 1, processes.MAX_PAGE, True)
    history = list(p.history)
    while history and len(history) < min(MAX_HISTORY, p.events - p.first_event + 1):  # (a page a read)
        more = yield from processes.read(b, queue, run_id, p.first_event + len(history), processes.MAX_PAGE)
        if not more.history:
            break
        history += more.history
    return info(dataclasses.replace(p, history=history), with_timeline=True)


def _interrupt(r: DurableRun, reason: str) -> Plan[None]:
    """Publish a durable cancel notice to the server running the input that holds run ``r``'s
    turn, if one does, and keep it a while for a server not subscribed to the cancel channel yet
    (best effort: without it, the cancel input ends the run after that input)."""
    q = queue_keys(r.queue)
    holder = (yield [Call(lambda v: v, command=("HGET", q.keyheld, key_of(r.id)))])[0]
    if not isinstance(holder, bytes):
        return
    input_id = holder.decode(errors="surrogateescape")
    stored = (yield [Call(lambda v: v, command=("HGET", q.tasks, holder))])[0]
    if not isinstance(stored, bytes) or not is_active(stored):
        return
    token = token_of(stored).decode(errors="surrogateescape")
    notice = cancelling.notice(r.queue, input_id, token, r.id, reason)
    # kept a while as well: a server that was not subscribed yet (it had just started, or was
    # subscribing again) reads it once it is (worker/canceller.py), else the step would run on
    yield [Call(lambda v: v, command=("SET", q.durable_cancel(r.id), notice, "PX", cancelling.KEPT_MS)),
           Call(lambda v: v, command=("PUBLISH", CANCEL_CHANNEL, notice))]


class DurableInspectorPlans:
    """The Inspector's durable-run methods (mixed into :class:`~asynqpy.core.inspector.plans.InspectorPlans`'s
    facades)."""

    broker: Broker

    @planned
    def durable_runs(self, queue: str = "default", *, state: str | None = None, function: str | None = None,
                     start: int = 0, count: int = 100) -> Steps[tuple[int, list[RunInfo]]]:
        """Durable runs of ``queue`` (docs/durable.md "Operating runs"): (how many match, ``count``
        of them from rank ``start``, the most recently changed first), each a
        :class:`~asynqpy.core.durable.timeline.RunInfo` without its timeline. ``state``: only runs
        in it (``starting``, ``running``, ``retrying``, ``sleeping``, ``waiting``, ``completed``,
        ``failed``, ``cancelled``, ``error``); ``function``: only its runs. Reads every process
        record of the queue (O(processes))."""
        return listing(queue, state, function, start, count)

    @planned
    def durable_counts(self, queue: str = "default", *, scan: int = 10_000) -> Steps[dict[str, dict[str, int]]]:
        """How many durable runs of ``queue`` each function has in each state (function -> state
        -> count), among the first ``scan`` process records of the queue (the metrics' read:
        bounded)."""
        return counts(queue, scan)

    @planned
    def durable_run(self, queue: str, run_id: str) -> Steps[RunInfo]:
        """A durable run and its timeline: each step's start, end, attempts and result or error,
        sleeps with their wake time, waits, the signals sent and the position that consumed each,
        the tasks awaited (:class:`~asynqpy.core.durable.timeline.TimelineEntry`). Raises
        ProcessNotFoundError."""
        return read(self.broker, queue, run_id)


class DurableOpsPlans(DurablePlans):
    """The clients' operator methods on runs: :meth:`resume`, :meth:`resume_failed`, and
    :meth:`cancel` reaching the running step."""

    @planned
    def cancel(self, /, run: DurableRun | str, *, queue: str | None = None, reason: str = "",
               timeout: float | None = 30.0) -> Steps[bool]:
        """Cancel a run: a step running now is cancelled cooperatively (an async step gets
        ``asyncio.CancelledError``; a plain one sees ``ctx.cancelled``) and the run ends
        ``cancelled``; a run between inputs (sleeping, waiting) ends ``cancelled`` at once. True,
        or False if the run had finished (core/durable/cancelling.py)."""
        r = _run_of(run, queue)
        yield from _interrupt(r, reason)
        return (yield from DurablePlans.cancel.plan(self, r, reason=reason, timeout=timeout))

    @planned
    def resume(self, /, run: DurableRun | str, *, queue: str | None = None, reason: str = "",
               timeout: float | None = 30.0) -> Steps[bool]:
        """Resume a run that ``failed`` (its function raised: a step's final failure not caught)
        or stopped in ``error`` (its code no longer matched its history), on the code deployed now:
        it goes on from its failed step (run again, with its retries) or from where the mismatch
        stopped it. True once the resume committed; False if the run is in neither state."""
        r = _run_of(run, queue)
        p = yield from processes.read(self.broker, r.queue, r.id, 0, 0)
        if not is_run(p):
            raise InvalidArgumentError(f"process {r.id!r} is a {p.type!r}, not a durable run")
        if p.status == ERROR:
            yield from ClientPlans.repair_process.plan(self, r.id, {"op": RESUME, "reason": reason}, timeout=timeout,
                                                       queue=r.queue)
            return True
        if state_of(p) != FAILED:
            return False
        got = yield from ClientPlans.call_process.plan(self, r.id, {"op": RESUME, "reason": reason}, timeout=timeout,
                                                       queue=r.queue)
        return bool(got)

    @planned
    def resume_failed(self, /, queue: str = "default", *, function: str | None = None, reason: str = "",
                      timeout: float | None = 30.0, limit: int = 1000) -> Steps[list[str]]:
        """Resume every run of ``queue`` (of ``function`` if given) that failed or stopped in
        error, at most ``limit`` of them, one after the other: the ids resumed."""
        done: list[str] = []
        for state in RESUMABLE:
            _, runs = yield from listing(queue, state, function, 0, min(limit, MAX_PAGE))
            for info_ in runs:
                if len(done) >= limit:
                    return done
                if (yield from DurableOpsPlans.resume.plan(self, info_.id, queue=queue, reason=reason,
                                                           timeout=timeout)):
                    done.append(info_.id)
        return done


__all__ = ["TYPE_PREFIX", "DurableInspectorPlans", "DurableOpsPlans", "listing", "read"]
