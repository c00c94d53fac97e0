"""A durable run's life around its replay (sans I/O; docs/durable.md "Operating runs"): what a
finished run does with an input, **resume** (a run that failed or stopped in error goes on from
its failed step on the code deployed now), **retention** (a finished run is removed once its
retention passed: its last input sets the run's timer to it, and that timer removes it), and the
start time of each step (``s`` in its record, for the timeline).

Resume appends a ``resume`` event. The history stays append-only; :func:`resumed` is the history
the replay sees: a ``failed`` end before a ``resume`` is left out, and so is the final failure
(and the failed attempts) of the step whose uncaught ``StepFailedError`` failed the run, so that
step runs again, with its full retries, on the new code. A run stopped in ``error`` (a
determinism mismatch) is resumed by a repair input: the replay on the new code goes on from where
it stopped.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from ..model.errors import InvalidArgumentError
from ..processes.model import Input, Process, Step
from . import cancelling, traced
from .function import DurableFunction
from .function import _history as history_of
from .replay import CANCELLED, FAILED, FINISHED

DEFAULT_RETENTION_S = 7 * 86400.0
"""How long a finished run (completed, failed, cancelled) is kept unless its function says."""
RESUME = "resume"
_STEPS = ("step", "task")


def retention_seconds(retention: timedelta | float | None) -> float | None:
    """A function's retention (a timedelta or seconds >= 0; None: kept until removed), in seconds."""
    seconds = retention.total_seconds() if isinstance(retention, timedelta) else retention
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0):
        raise InvalidArgumentError(f"a durable function's retention is a timedelta or seconds >= 0 (None: kept), "
                                   f"got {retention!r}")
    return None if seconds is None else float(seconds)


def op_of(i: Input) -> str:
    """The input's operation: its kind, or for a call the op it carries (signal, cancel, resume)."""
    if i.kind == "call" and isinstance(i.args, dict):
        return str(i.args.get("op", "call"))
    return i.kind


def finished_input(state: dict[str, Any], i: Input, retention: float | None) -> Step | None:
    """What an input does to a finished run (None: the run is not finished, or the input resumes
    it): its retention timer removes it; a cancel of a run its step's cancellation ended answers
    True; anything else is refused (False)."""
    status = state.get("status")
    if status not in FINISHED:
        return None
    op = op_of(i)
    if op == RESUME and status == FAILED:
        return None
    if i.kind == "timeout" and retention is not None:
        return Step(remove=True)
    if op == "cancel" and status == CANCELLED and state.get("cooperative"):
        return Step(state={**state, "cooperative": False}, response=True)  # the cancel that interrupted its step
    return Step(response=False)


def resume_events(state: dict[str, Any], i: Input) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the events a resume appends, the state it goes on from) for a resume or a repair input;
    ([], state) for any other."""
    op = op_of(i)
    if op != RESUME and i.kind != "repair":
        return [], state
    reason = i.args.get("reason", "") if isinstance(i.args, dict) else ""
    return [{"k": RESUME, "from": str(state.get("status", "")), "reason": str(reason or "")}], \
        {k: v for k, v in state.items() if k not in ("error", "result")}


def resumed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as the replay sees it: each ``failed`` end followed by a ``resume`` left out,
    with the final failure and failed attempts of the step that failed the run."""
    if not any(e.get("k") == RESUME for e in events):
        return events
    drop: set[int] = set()
    for r, e in enumerate(events):
        if e.get("k") == RESUME:
            drop |= _undone(events, r, drop)
    return [e for n, e in enumerate(events) if n not in drop]


def _undone(events: list[dict[str, Any]], r: int, drop: set[int]) -> set[int]:
    """What the resume at index ``r`` leaves out: the last ``failed`` end before it (not left out
    already) and, if a step's StepFailedError failed the run, that step's final failure and attempts."""
    f = next((n for n in range(r - 1, -1, -1) if events[n].get("k") == "failed" and n not in drop), None)
    if f is None:
        return set()
    if not str(events[f].get("e", "")).startswith("StepFailedError"):
        return {f}
    last = next((n for n in range(f - 1, -1, -1) if events[n].get("i") is not None and n not in drop), None)
    if last is None or events[last].get("k") not in _STEPS or "e" not in events[last]:
        return {f}
    pos = events[last].get("i")
    return {f, last} | {n for n in range(last) if events[n].get("k") == "try" and events[n].get("i") == pos}


def stamp(events: Any, start_ms: int) -> None:
    """Give each step attempt recorded by this input its start (``s``: when the input began)."""
    for e in events:
        if isinstance(e, dict) and e.get("k") in ("step", "task", "try") and "s" not in e:
            e["s"] = start_ms


def ended(step: Step, retention: float | None) -> Step:
    """A step that finishes the run sets its retention timer (None: no timer)."""
    if isinstance(step.state, dict) and step.state.get("status") in FINISHED:
        step.timer = retention
    return step


def cancelled(run_id: str, input_id: str, state: dict[str, Any], appended: list[dict[str, Any]],
              step: Step | None) -> Step:
    """The step of an input whose run was asked to cancel cooperatively while it ran
    (core/durable/cancelling.py): the run ends cancelled in this commit (with what the input recorded,
    a step that returned among it). ``step`` None: the input's handler was cancelled, which is
    re-raised unless a request explains it (a server's shutdown). Without a request to this input
    (``input_id``), ``step``."""
    reason = cancelling.take(run_id, input_id)
    if step is not None and isinstance(step.state, dict) and step.state.get("status") in FINISHED:
        return step  # it ended meanwhile: the cancel input finds it finished
    if reason is None:
        if step is None:
            raise asyncio.CancelledError
        return step
    if step is None:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # the cancellation was this request's, and is handled here
    events = [e for e in (step.events if step is not None else appended) if isinstance(e, dict)]
    done = {**state, "status": CANCELLED, "error": reason or "cancelled", "cooperative": True}
    return Step(events=[*events, {"k": "cancelled", "reason": reason, "during": "step"}], state=done, timer=None,
                response=step.response if step is not None else None)


class Managed(DurableFunction):
    """A durable function as ``@app.durable`` / ``mux.durable`` register it: the replay of
    :class:`~asynqpy.core.durable.replay.DurableFunction` and the run's life around it.
    ``retention``: how long a finished run is kept (a timedelta or seconds; None: until removed;
    default :data:`DEFAULT_RETENTION_S`)."""

    def __init__(self, fn: Any, name: str | None = None, queue: str = "default", client: Any = None,
                 retention: timedelta | float | None | str = "default", min_worker_version: str | None = None) -> None:
        super().__init__(fn, name, queue, client, min_worker_version)
        self.retention = DEFAULT_RETENTION_S if retention == "default" else retention_seconds(retention)  # type: ignore[arg-type]

    async def process(self, p: Process, i: Input) -> Step:
        """One input of a run (:meth:`_process`), traced when tracing is on (core/durable/traced.py:
        a span per input, in the run's one trace, whose context its state keeps)."""
        handle, carrier = traced.input_started(p.queue, p.id, self.name, op_of(i), p.state)
        error: BaseException | None = None
        step: Step | None = None
        try:
            step = traced.kept(await self._process(p, i), carrier)
            return step
        except BaseException as exc:
            error = exc
            raise
        finally:
            traced.input_ended(handle, error, step)

    async def _process(self, p: Process, i: Input) -> Step:
        """One input of a run. A finished run's input ends here (its retention's removal, a late
        signal refused); a start, a signal or a resume is appended to the history; the function
        is replayed (on the history a resume makes it see); a cancel ends the run, and so does a
        cooperative cancel that reached this input's step; a step that finishes the run sets its
        retention timer."""
        state = dict(p.state or {})
        late = finished_input(state, i, self.retention)
        if late is not None:
            return late
        events = history_of(p)
        appended, state = resume_events(state, i)
        if i.kind == "init":  # (a child run's start names its parent: {"a": args, "p": parent})
            a = i.args if isinstance(i.args, dict) else {"a": i.args}
            appended.append({"k": "start", "a": list(a.get("a") or []), **({"p": a["p"]} if a.get("p") else {})})
        elif i.kind == "call":
            op, args = _op(i.args)
            if op == "cancel":
                error = str(args.get("reason") or "cancelled")
                await self._cancel_children(events)
                await self._tell_parent(p.id, events, CANCELLED, None, error)
                done = {**state, "status": CANCELLED, "error": error}
                return ended(Step(events=[{"k": "cancelled", "reason": error}], state=done, timer=None,
                                  response=True), self.retention)
            if op == "signal":
                appended.append({"k": "signal", "n": args["name"], "p": args.get("payload")})
        start = int(time.time() * 1000)
        try:
            step = await self.replay(p.id, resumed(events + appended), appended, state, i)
        except asyncio.CancelledError:
            step = cancelled(p.id, i.task_id, state, appended, None)  # its step was cancelled (or re-raised)
        else:
            step = cancelled(p.id, i.task_id, state, appended, step)
        stamp(step.events, start)
        return ended(step, self.retention)


def _op(args: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(args, dict) or args.get("op") not in ("signal", "cancel", RESUME):
        raise InvalidArgumentError(f"not an input of a durable run: {args!r}")
    return str(args["op"]), args
