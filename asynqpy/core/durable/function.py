"""The processor of a durable function's runs (docs/internals-durable.md): each input of a run
(its start, a timer, a signal or a cancellation) replays the function against the run's history
(:class:`~asynqpy.core.durable.replay.Durable`) and becomes the Step its commit writes; a child
run tells its parent how it ended, a cancelled run cancels its children."""

from __future__ import annotations

import functools
import inspect
import uuid as _uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ..deploy.versions import encode_version, format_version
from ..model.errors import InvalidArgumentError, LeaseLostError
from ..processes.model import CHECKPOINT, Input, Process, Step, validate_id, validate_type
from .replay import (
    CANCELLED,
    COMPLETED,
    FAILED,
    FINISHED,
    MAX_HISTORY,
    RUNNING,
    TYPE_PREFIX,
    DeterminismError,
    Durable,
    DurableError,
    _ContinueAsNew,
    _Lost,
    _now_ms,
    _Suspend,
    _wire,
)

# -- the processor of a durable function's runs ----------------------------------------------------


def process_type(name: str) -> str:
    return validate_type(TYPE_PREFIX + name)


def _signal_op(args: Any) -> tuple[str, Any]:
    if not isinstance(args, dict) or args.get("op") not in ("signal", "cancel"):
        raise InvalidArgumentError(f"not an input of a durable run: {args!r}")
    return args["op"], args


class DurableFunction:
    """A durable function registered with ``@app.durable`` / ``mux.durable``: ``name`` (its runs'
    process type is ``durable.<name>``), ``queue`` (where its runs live), ``fn``,
    ``min_worker_version`` (its runs' version gate unless ``client.start`` gives one; '' = none).
    Start a run with ``client.start(f, *args, id=...)``."""

    def __init__(self, fn: Callable[..., Awaitable[Any]], name: str | None = None, queue: str = "default",
                 client: Callable[[], Any] | None = None, min_worker_version: str | None = None) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise InvalidArgumentError(f"a durable function is an async def taking (ctx: Durable, ...), got {fn!r}")
        self.fn = fn
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        self.type = process_type(self.name)
        self.queue, self.client = queue, client
        self.min_worker_version = format_version(encode_version(min_worker_version)) if min_worker_version else ""
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"<durable {self.name}>"

    async def process(self, p: Process, i: Input) -> Step:
        """The processor of the runs (one input): replay, then what to commit."""
        state = dict(p.state or {})
        if state.get("status") in FINISHED:
            return Step(response=False)  # a finished run takes nothing more (a late signal, a stale timer)
        events = _history(p)
        appended: list[dict[str, Any]] = []
        if i.kind == "init":  # (a child run's start names its parent: {"a": args, "p": parent})
            a = i.args if isinstance(i.args, dict) else {"a": i.args}
            appended.append({"k": "start", "a": list(a.get("a") or []), **({"p": a["p"]} if a.get("p") else {})})
        elif i.kind == "call":
            op, args = _signal_op(i.args)
            if op == "cancel":
                error = str(args.get("reason") or "cancelled")
                await self._cancel_children(events)
                await self._tell_parent(p.id, events, CANCELLED, None, error)
                done = {**state, "status": CANCELLED, "error": error}
                return Step(events=[{"k": "cancelled"}], state=done, timer=None, response=True)
            appended.append({"k": "signal", "n": args["name"], "p": args.get("payload")})
        return await self.replay(p.id, events + appended, appended, state, i)

    async def replay(self, run_id: str, events: list[dict[str, Any]], appended: list[dict[str, Any]],
                     state: dict[str, Any], i: Input) -> Step:
        if not events or events[0].get("k") != "start":
            raise DurableError(f"durable run {run_id!r}: its history does not begin with its start")
        # a signal's input ends after its first new step (its sender waits for the commit); the
        # others go on step after step, each checkpointed (the worker's, None without one)
        checkpoint = CHECKPOINT.get() if i.kind != "call" else None
        ctx = Durable(run_id, events, _now_ms(), self.client, self.queue, len(appended), checkpoint, i.task_id)
        response = True if i.kind == "call" else None
        try:
            value = await self.fn(ctx, *events[0]["a"])
        except _Suspend as s:
            return Step(events=ctx._new, state={**state, "status": s.status}, timer=s.timer, response=response)
        except _Lost as exc:
            raise LeaseLostError(str(exc)) from None
        except _ContinueAsNew as c:
            fresh = [{"k": "start", "a": c.start, "g": ctx._gen + 1},
                     *({"k": "signal", "n": n, "p": p} for n, p in c.signals)]
            return Step(events=fresh, state={**state, "status": RUNNING}, timer=0, response=response,
                        keep=len(fresh))
        except DeterminismError:
            raise
        except Exception as exc:  # noqa: BLE001 - the function's own failure is its outcome
            error = f"{type(exc).__name__}: {exc}"
            await self._tell_parent(run_id, events, FAILED, None, error)
            return Step(events=[*ctx._new, {"k": "failed", "e": error}],
                        state={**state, "status": FAILED, "error": error}, timer=None, response=response)
        try:
            value = _wire(value, "the run's result")
        except InvalidArgumentError as exc:
            raise DurableError(f"durable run {run_id!r}: its result cannot be stored: {exc}") from None
        await self._tell_parent(run_id, events, COMPLETED, value, "")
        return Step(events=[*ctx._new, {"k": "done", "v": value}],
                    state={**state, "status": COMPLETED, "result": value}, timer=None, response=response)


    async def _tell_parent(self, run_id: str, events: list[dict[str, Any]], status: str, value: Any,
                           error: str) -> None:
        """A child run ends: its parent (named by its start) gets the end as an internal signal,
        before the child's end is committed (sent again if that commit fails: the idempotency key
        makes it one signal); not waited for. A parent gone or finished ignores it."""
        parent = events[0].get("p") if events else None
        if not parent or self.client is None:
            return
        from ..processes.model import ProcessError
        from .tasks import signal_name

        name = signal_name(int(parent["i"]), int(parent.get("g") or 0))
        try:
            await self.client().signal(parent["run"], name, {"s": status, "v": value, "e": error},
                                       queue=parent["q"], timeout=0, idempotency_key=f"child-end:{run_id}")
        except (TimeoutError, ProcessError):
            pass  # (sent, not waited for; or the parent is gone or in error)

    async def _cancel_children(self, events: list[dict[str, Any]]) -> None:
        """A cancelled run cancels the child runs it started (those that ended say False)."""
        if self.client is None:
            return
        from ..processes.model import ProcessError

        for e in events:
            if e.get("k") == "child" and isinstance(e.get("v"), dict):
                try:
                    await self.client().cancel(e["v"]["id"], queue=e["v"]["q"], timeout=0,
                                               reason="its parent run was cancelled")
                except (TimeoutError, ProcessError):
                    pass


def _history(p: Process) -> list[dict[str, Any]]:
    """The run's whole history (each input reads it whole: at most MAX_HISTORY events)."""
    if p.events - p.first_event + 1 > MAX_HISTORY or len(p.history) != p.events - p.first_event + 1:
        raise DeterminismError(f"durable run {p.id!r} has {p.events} events: more than a run replays "
                               f"({MAX_HISTORY})")
    return [e.data for e in p.history]


def signal_args(name: str, payload: Any) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a signal name is a non-empty string, got {name!r}")
    return {"op": "signal", "name": name, "payload": payload}


def run_id(id: str | None) -> str:
    return validate_id(id) if id is not None else str(_uuid.uuid4())


__all__ = ["DurableFunction", "process_type", "run_id", "signal_args"]
