"""Durable functions, sans I/O (docs/durable.md; docs/internals-durable.md).

A durable function is ordinary async code (``@app.durable``) whose effects go through a
:class:`Durable` context: steps (``ctx.step``), sleeps, signal waits, and deterministic values
(``ctx.now``, ``ctx.uuid``, ``ctx.random``). A *run* of it is a durable process
(:mod:`asynqpy.core.processes.model`) of type ``durable.<name>``: its inputs are its start (``init``),
its timers (``timeout``: a continuation, a sleep's or a wait's deadline, a step's retry) and its
signals and cancellation (``call``). Each input *replays* the function from the top against the
run's history:

- an operation already in the history returns what it recorded (a step's result or error, a
  sleep that fired, the signal a wait got), without running anything;
- the first operation not in the history is *new*: a step runs, its result is written at once
  (the worker's checkpoint, ``proc_step``) and the function goes on in the same input (or, when
  another input waits for the run, the input ends and a timer of 0 s continues it); a sleep or a
  wait records itself and sets the process's timer to its deadline; the run then holds no worker;
- an operation whose kind or name differs from the one recorded at its position stops the run in
  ``error`` (:class:`DeterminismError`) before anything runs.

So a completed step never runs again (its record is committed with the input that ran it), and a
step interrupted by a crash runs again (at least once: ``ctx.step_id`` keys external calls).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import random as _random
import time
import uuid as _uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, NoReturn, TypeVar

import msgpack

from ..model import codec
from ..model.errors import InvalidArgumentError, LeaseLostError, TaskNotFoundError
from ..processes.model import (
    CHECKPOINTED_HISTORY,
    HISTORY_WINDOW,
    NOW,
    Checkpoint,
)
from . import traced
from .errors import DeterminismError as DeterminismError
from .errors import DurableError as DurableError
from .errors import RunFailedError as RunFailedError
from .errors import StepFailedError as StepFailedError

T = TypeVar("T")

TYPE_PREFIX = "durable."
"""Process type of a durable function's runs: ``durable.<name>``."""
MAX_HISTORY = CHECKPOINTED_HISTORY
"""The most events a run's history may hold (its input reads it whole); ``ctx.continue_as_new``
starts a fresh one."""

RUNNING, SLEEPING, WAITING, RETRYING = "running", "sleeping", "waiting", "retrying"
COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"
FINISHED = (COMPLETED, FAILED, CANCELLED)

# kinds of the history's events (each a dict; "k" the kind, "i" the operation's position)
_OPS = ("step", "task", "try", "sleep", "wait", "now", "uuid", "random", "version", "child")


@dataclass(frozen=True)
class Retry:
    """A step's retry policy: ``attempts`` in all (1 = no retry), the first retry ``delay``
    seconds after the failure, each next one ``backoff`` times longer, at most ``max_delay``. A
    retry waits on the run's timer: it holds no worker."""

    attempts: int = 3
    delay: float = 1.0
    backoff: float = 2.0
    max_delay: float = 300.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise InvalidArgumentError(f"Retry.attempts must be an int >= 1, got {self.attempts!r}")
        for name in ("delay", "backoff", "max_delay"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise InvalidArgumentError(f"Retry.{name} must be a number >= 0, got {v!r}")

    def delay_ms(self, failed: int) -> int:
        """The wait after the ``failed``-th failed attempt, in milliseconds."""
        return int(min(self.max_delay, self.delay * self.backoff ** (failed - 1)) * 1000)


DEFAULT_RETRY = Retry()


@dataclass(frozen=True)
class DurableRun:
    """A handle on a run (what ``client.start`` returns): its ``id``, ``queue`` and function
    ``name``; ``created`` is False when a run with this id existed (nothing was started)."""

    id: str
    queue: str = "default"
    name: str = ""
    created: bool = True


class _Lost(BaseException):
    """A checkpoint failed (the input's lease lost, Redis unreachable): the input ends without
    writing anything more (a BaseException: the function's ``except Exception`` does not catch
    it); it runs again from what the history holds."""


class _ContinueAsNew(BaseException):
    """``ctx.continue_as_new``: the run starts again with ``start`` (its arguments) and the
    ``signals`` not taken."""

    def __init__(self, start: list[Any], signals: list[tuple[str, Any]]) -> None:
        super().__init__("continue as new")
        self.start, self.signals = start, signals


class _Suspend(BaseException):
    """The run stops here for this input (a BaseException, so that ``except Exception`` in the
    function does not swallow it). ``due_ms``: the run's next timer (ms), or None."""

    def __init__(self, status: str, due_ms: int | None) -> None:
        super().__init__(status)
        self.status, self.due_ms = status, due_ms

    @property
    def timer(self) -> datetime | None:
        """The Step's timer: the due time (set again on every input that stops here, so a timer
        that fired a little early by this worker's clock is not lost), or None (no timer)."""
        return None if self.due_ms is None else datetime.fromtimestamp(self.due_ms / 1000, timezone.utc)


def _wire(v: Any, what: str = "step result") -> Any:
    """A recorded value as replay returns it (msgpack round trip: a tuple reads back as a list)."""
    return msgpack.unpackb(codec.encode_payload(v, what), raw=False, strict_map_key=False)


class Durable:
    """The context of a durable function's run (its first argument). Every effect that must not
    be repeated on replay goes through it; the function's own code runs again on every input."""

    def __init__(self, run_id: str, events: list[dict[str, Any]], now_ms: int, client: Callable[[], Any] | None = None,
                 queue: str = "default", unsaved: int = 0, checkpoint: Checkpoint | None = None,
                 input_id: str = "") -> None:
        self.run_id, self._client, self._queue = run_id, client, queue
        self._input = input_id  # the input replaying the run now (a cooperative cancel is addressed to it)
        self._gen = int(events[0].get("g") or 0) if events else 0  # times the run continued as new
        self._tag = run_id if not self._gen else f"{run_id}~{self._gen}"
        self._now_ms = now_ms
        self._events = events  # the history as recorded, then what this input appends
        # what this input appended and has not written yet (its last ``unsaved`` events at first)
        self._new: list[dict[str, Any]] = events[len(events) - unsaved:] if unsaved else []
        self._checkpoint = checkpoint
        self._seq = 0
        self._busy = False
        self._ops: dict[int, dict[str, Any]] = {}
        self._tries: dict[int, list[dict[str, Any]]] = {}
        self._fired: dict[int, int] = {}
        self._signals: list[tuple[int, str, Any]] = []
        self._consumed: set[int] = set()
        for n, e in enumerate(events):
            self._index(n, e)

    # -- the history ------------------------------------------------------------------------------

    def _index(self, n: int, e: dict[str, Any]) -> None:
        k = e.get("k")
        if k == "try":
            self._tries.setdefault(e["i"], []).append(e)
            self._ops.setdefault(e["i"], e)
        elif k in _OPS:
            if k in ("step", "task", "child") or e["i"] not in self._ops:
                self._ops[e["i"]] = e
        elif k == "fired":
            self._fired.setdefault(e["i"], n)
        elif k == "signal":
            self._signals.append((n, e["n"], e.get("p")))

    def _record(self, e: dict[str, Any]) -> None:
        self._index(len(self._events), e)
        self._events.append(e)
        self._new.append(e)

    def _op(self, kind: str, name: str | None) -> tuple[int, dict[str, Any] | None]:
        """The next position and what the history holds there (None: new); a different operation
        recorded there raises DeterminismError."""
        if self._busy:
            raise DurableError("one ctx operation at a time: await each before the next, or ctx.gather them")
        self._seq += 1
        seq = self._seq
        rec = self._ops.get(seq)
        if rec is not None:
            was = rec.get("o", "step") if rec["k"] == "try" else rec["k"]
            if was != kind or rec.get("n") != name:
                raise DeterminismError(
                    f"durable run {self.run_id!r}: at position {seq} the history holds {_name(was, rec.get('n'))} but "
                    f"the code now asks for {_name(kind, name)}; the code no longer matches the run's history")
        return seq, rec

    # -- deterministic values ---------------------------------------------------------------------

    def _value(self, kind: str, make: Callable[[], Any]) -> Any:
        seq, rec = self._op(kind, None)
        if rec is None:
            rec = {"k": kind, "i": seq, "v": make()}
            self._record(rec)
        return rec["v"]

    def now(self) -> datetime:
        """The current time (UTC), recorded on first use: a replay gets the same time."""
        ms = self._value("now", lambda: self._now_ms)
        return datetime.fromtimestamp(ms / 1000, timezone.utc)

    def uuid(self) -> str:
        """A random UUID (text), recorded on first use: a replay gets the same one."""
        return str(self._value("uuid", lambda: str(_uuid.uuid4())))

    def random(self) -> float:
        """A random float in [0, 1), recorded on first use: a replay gets the same one."""
        return float(self._value("random", _random.random))

    @property
    def step_id(self) -> str:
        """Inside a step: ``<run id>:<position>:<step name>``, the same on each of its attempts
        (a retry, a re-run after a crash): an idempotency key for the step's external calls.
        Outside a step: ''."""
        return _STEP_ID.get()

    @property
    def cancelled(self) -> bool:
        """Whether ``client.cancel`` is cancelling the run while this input runs: a plain step (in
        a thread) looks and returns early; an async step is cancelled (core/durable/cancelling.py)."""
        from .cancelling import requested

        return requested(self.run_id, self._input) is not None

    # -- versions and continuing as new ---------------------------------------------------------

    def version(self, change: str) -> bool:
        """Whether this run takes the new code path of ``change`` (a name for one change of the
        code, e.g. ``"send-sms"``): True for a run that reaches this point on code that has the
        call (recorded: every replay says True again); False for a run that passed this point on
        code that did not (its history holds another operation here): it keeps the old path, as
        recorded. Write ``if ctx.version("send-sms"): <new> else: <old>``; once no run is left on
        the old path, keep the call and drop the else branch."""
        if not isinstance(change, str) or not change:
            raise InvalidArgumentError(f"ctx.version takes a change's name (a non-empty string), got {change!r}")
        if self._busy:
            raise DurableError("one ctx operation at a time: await each before the next, or ctx.gather them")
        seq = self._seq + 1
        rec = self._ops.get(seq)
        if rec is not None and (rec["k"] != "version" or rec.get("n") != change):
            return False  # the run passed here without the change: the old path, no position taken
        self._seq = seq
        if rec is None:
            self._record({"k": "version", "i": seq, "n": change})
        return True

    def continue_as_new(self, *args: Any) -> NoReturn:
        """End this run's history and start the function again from the top with ``args``, in the
        same run (its id, its queue): a fresh history (the old one is deleted), so a run that loops
        forever stays bounded. Signals sent and not taken yet are carried over. Never returns
        (a BaseException unwinds the function, as a suspension)."""
        raise _ContinueAsNew(start_args(args), [(n, p) for k, n, p in self._signals
                                                if k not in self._consumed and not n.startswith("\x00")])

    # -- steps ------------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., T | Awaitable[T]], *args: Any,
             retry: Retry | None = None) -> Awaitable[T]:
        """Run ``fn(*args)`` (a plain function runs in a thread; a coroutine function on the
        worker's loop) once for the run: its result (msgpack-able) is recorded with the input that
        ran it and returned as recorded on every replay. A failure is retried per ``retry``
        (default: 3 attempts, 1 s then 2 s apart), each retry waiting on the run's timer; the last
        failure raises :class:`StepFailedError` here (and on replay), which the function may catch.
        A step interrupted by a crash runs again: use ``ctx.step_id`` as its idempotency key."""
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a step name is a non-empty string, got {name!r}")
        if not callable(fn):
            raise InvalidArgumentError(f"step {name!r}: {fn!r} is not callable")
        policy = retry or DEFAULT_RETRY
        if not isinstance(policy, Retry):
            raise InvalidArgumentError(f"step {name!r}: retry= takes a Retry, got {retry!r}")
        return _Op(self, lambda: self._step(name, fn, args, policy))

    def _step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], policy: Retry, kind: str = "step") -> Any:
        """What the history says of the step (its value; raises StepFailedError, or _Suspend while
        its retry is not due), or a :class:`_Pending` step to run now."""
        seq, rec = self._op(kind, name)
        if rec is not None and rec["k"] == kind:
            if "e" in rec:
                raise StepFailedError(name, rec["e"], rec.get("t", ""))
            return rec.get("v") if kind == "step" else self._task_end(seq, name, kind)
        tries = self._tries.get(seq, [])
        if tries and tries[-1]["at"] > self._now_ms:
            raise _Suspend(RETRYING, tries[-1]["at"])  # its retry timer is pending
        return _Pending(seq, name, fn, args, policy, len(tries) + 1, kind)

    def task(self, task: Any, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Enqueue a normal task (a task function of an App with its arguments, or a task type, its
        payload and enqueue options) once for the run, and its result once it completed, waiting
        durably (no worker held); StepFailedError if it ended otherwise (archived, deleted). Needs
        the client the run enqueues with (``@app.durable``, or ``mux.durable(client=...)``)."""
        from .tasks import enqueue, target

        if self._client is None:
            raise DurableError("ctx.task needs a client: register with @app.durable or mux.durable(client=...)")
        type_, payload, options = target(task, args, kwargs)
        client, run, queue = self._client, self.run_id, self._queue

        gen = self._gen

        async def send(seq: int) -> str:
            return await enqueue(client(), run, queue, seq, type_, payload, options, gen)

        return _Op(self, lambda: self._step(type_, send, (), DEFAULT_RETRY, "task"))

    def child(self, fn: Any, *args: Any, id: str | None = None, queue: str | None = None) -> Awaitable[Any]:
        """Start durable function ``fn`` (``@app.durable``, or its name) as a *child run* of this
        one with ``args``, once for the run, and its result once it ended, waiting durably (no
        worker held); StepFailedError if it failed or was cancelled. ``id``: the child run's id
        (default ``<run id>:<position>:child``); ``queue``: its queue (default the function's). A
        cancellation of this run cancels its children. Needs the client the run enqueues with."""
        from .tasks import start_child

        if self._client is None:
            raise DurableError("ctx.child needs a client: register with @app.durable or mux.durable(client=...)")
        name = fn if isinstance(fn, str) else getattr(fn, "name", None)
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"ctx.child takes a durable function (@app.durable) or its name, got {fn!r}")
        client, parent = self._client, {"run": self.run_id, "q": self._queue, "g": self._gen}
        child_args = start_args(args)

        async def send(seq: int) -> dict[str, str]:
            return await start_child(client(), fn, child_args, id or f"{self._tag}:{seq}:child", queue,
                                     {**parent, "i": seq})

        return _Op(self, lambda: self._step(name, send, (), DEFAULT_RETRY, "child"))

    def _task_end(self, seq: int, name: str, kind: str = "task") -> Any:
        from .tasks import signal_name

        wanted = signal_name(seq, self._gen)
        for n, sig, payload in self._signals:
            if sig == wanted and n not in self._consumed:
                self._consumed.add(n)
                if payload.get("s") != "completed":
                    what = f"task {self._tag}:{seq}:task" if kind == "task" else f"child run {name!r}"
                    error = f": {payload['e']}" if payload.get("e") else ""
                    raise StepFailedError(name, f"{what} ended {payload.get('s')}{error}",
                                          "TaskFailed" if kind == "task" else "ChildFailed")
                return payload.get("v")
        raise _Suspend(WAITING, None)

    async def _run(self, p: _Pending) -> int:
        """Run a new step's body and record what came of it; the due time of the run's next input
        (now: go on; a retry's time)."""
        token = _STEP_ID.set(f"{self._tag}:{p.seq}:{p.name}")
        span = traced.op_started(p.kind, p.name, p.seq, attempt=p.attempt, attempts=p.policy.attempts)
        failed: BaseException | None = None
        try:
            value = _wire(await (p.fn(p.seq) if p.kind in ("task", "child") else _call(p.fn, p.args)))
        except BaseException as exc:  # (a cancellation, a lost input: its span ends failed too)
            failed = exc
            if not isinstance(exc, Exception):
                raise
            error = f"{type(exc).__name__}: {exc}"
            if p.attempt < p.policy.attempts:
                at = self._now_ms + p.policy.delay_ms(p.attempt)
                self._record({"k": "try", "i": p.seq, "n": p.name, "a": p.attempt, "e": error, "at": at, "o": p.kind})
                return at
            self._record({"k": p.kind, "i": p.seq, "n": p.name, "e": error, "t": type(exc).__name__, "a": p.attempt})
            return self._now_ms
        finally:
            _STEP_ID.reset(token)
            traced.op_ended(span, failed)
        self._record({"k": p.kind, "i": p.seq, "n": p.name, "v": value, "a": p.attempt})
        return self._now_ms

    async def _await(self, op: _Op[T]) -> T:
        start = self._seq
        got = op.resolve()
        if not isinstance(got, _Pending):
            return got  # type: ignore[no-any-return]
        self._busy = True
        try:
            due = await self._run(got)
        finally:
            self._busy = False
        if due == self._now_ms and await self._go_on():
            self._seq = start  # the step is in the history now: it resolves as a replay would
            return op.resolve()  # type: ignore[no-any-return]
        # the record is committed with this input; the next input goes on (or retries)
        raise _Suspend(RUNNING if due == self._now_ms else RETRYING, due)

    async def _go_on(self) -> bool:
        """After a new step ended for good (its result or last error recorded): write what this
        input recorded so far (its checkpoint) and say whether the run goes on in this input (no
        other input waits for the run, its time is not spent); False without a checkpoint (the
        input ends, a continuation goes on)."""
        if self._checkpoint is None:
            return False
        events, self._new = self._new, []
        for e in events:  # (each step attempt's start, as life.stamp gives those the input's commit writes)
            if e.get("k") in ("step", "task", "try") and "s" not in e:
                e["s"] = self._now_ms
        try:
            end = await self._checkpoint(events)
        except (LeaseLostError, TaskNotFoundError) as exc:  # not the function's to catch: the input is let go
            raise _Lost(f"durable run {self.run_id!r}: its checkpoint was refused: {exc}") from exc
        except Exception:  # noqa: BLE001 - Redis full or unreachable: the input ends, its commit writes them
            self._new = events + self._new
            return False
        self._now_ms = _now_ms()
        return not end

    async def gather(self, *ops: Awaitable[Any]) -> list[Any]:
        """Await several ctx operations (steps, sleeps, waits) together: the new steps among them
        run concurrently in one input and are recorded together (a crash runs again those of them
        that ran); the results in order, once all are there. A step that failed for good raises its
        StepFailedError (the first in order), as ``asyncio.gather``."""
        mine = [o for o in ops if isinstance(o, _Op) and o.ctx is self]
        if len(mine) != len(ops):
            raise InvalidArgumentError("ctx.gather takes operations of this run's ctx (ctx.step(...), ctx.sleep(...), "
                                       "ctx.wait_for(...)), not awaited")
        start = self._seq
        results, pending, suspends = self._resolve_all(mine)
        if pending:
            results, pending, suspends = await self._run_all(mine, start, pending, suspends)
        if suspends:
            due = [s.due_ms for s in suspends if s.due_ms is not None]
            raise _Suspend(RUNNING if pending else suspends[0].status, min(due) if due else None)
        for r in results:
            if isinstance(r, StepFailedError):
                raise r
        return results

    async def _run_all(self, ops: list[_Op[Any]], start: int, pending: list[_Pending], suspends: list[_Suspend]) \
            -> tuple[list[Any], list[_Pending], list[_Suspend]]:
        """Run a gather's new steps concurrently (each recorded as it ends); once all ended for good
        and the checkpoint says go on, the operations resolved again (as a replay would), else
        where the steps leave the run."""
        self._busy = True
        try:
            dues = await asyncio.gather(*(self._run(p) for p in pending))
        finally:
            self._busy = False
        if all(d == self._now_ms for d in dues) and await self._go_on():
            self._seq = start  # the steps are in the history now
            return self._resolve_all(ops)
        return [], pending, suspends + [_Suspend(RUNNING if d == self._now_ms else RETRYING, d) for d in dues]

    @staticmethod
    def _resolve_all(ops: list[_Op[Any]]) -> tuple[list[Any], list[_Pending], list[_Suspend]]:
        """Each operation resolved in order (a DeterminismError stops all: nothing ran): the
        results (a StepFailedError in place), the new steps to run, the operations not done yet."""
        results: list[Any] = []
        pending: list[_Pending] = []
        suspends: list[_Suspend] = []
        for o in ops:
            try:
                got = o.resolve()
            except _Suspend as s:
                suspends.append(s)
                got = None
            except StepFailedError as exc:
                got = exc
            if isinstance(got, _Pending):
                pending.append(got)
            results.append(got)
        return results, pending, suspends

    # -- sleeps and signals -----------------------------------------------------------------------

    def sleep(self, delay: timedelta | float) -> Awaitable[None]:
        """Sleep ``delay`` (a timedelta, or seconds) durably: the run holds no worker; a timer
        resumes it (after a crash too)."""
        seconds = _seconds(delay, "ctx.sleep")
        if seconds is None:
            raise InvalidArgumentError("ctx.sleep takes a timedelta or seconds >= 0, got None")
        return _Op(self, lambda: self._sleep(lambda: self._now_ms + int(seconds * 1000)))

    def sleep_until(self, when: datetime) -> Awaitable[None]:
        """Sleep until ``when`` (an aware datetime) durably."""
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise InvalidArgumentError(f"ctx.sleep_until takes a timezone-aware datetime, got {when!r}")
        return _Op(self, lambda: self._sleep(lambda: int(when.timestamp() * 1000)))

    def _sleep(self, until: Callable[[], int]) -> None:
        seq, rec = self._op("sleep", None)
        if rec is None:
            rec = {"k": "sleep", "i": seq, "u": until()}
            self._record(rec)
            traced.op_instant("sleep", None, seq, until_ms=rec["u"])
        if seq in self._fired:
            return
        if rec["u"] <= self._now_ms:
            self._record({"k": "fired", "i": seq})
            return
        raise _Suspend(SLEEPING, rec["u"])

    def wait_for(self, signal: str, timeout: timedelta | float | None = None) -> Awaitable[Any]:
        """The payload of the next signal ``signal`` sent to the run (``client.signal``), waiting
        for it durably (holding no worker); signals sent before the wait are kept, in order, each
        taken by one wait. None once ``timeout`` (a timedelta or seconds; None = no limit) passes."""
        if not isinstance(signal, str) or not signal:
            raise InvalidArgumentError(f"a signal name is a non-empty string, got {signal!r}")
        limit = _seconds(timeout, "wait_for timeout")
        return _Op(self, lambda: self._wait(signal, limit))

    def _wait(self, signal: str, limit: float | None) -> Any:
        seq, rec = self._op("wait", signal)
        if rec is None:
            rec = {"k": "wait", "i": seq, "n": signal, "u": None if limit is None else self._now_ms + int(limit * 1000)}
            self._record(rec)
            traced.op_instant("wait", signal, seq, **({} if rec["u"] is None else {"until_ms": rec["u"]}))
        fired = self._fired.get(seq)
        for n, name, payload in self._signals:
            if name == signal and n not in self._consumed and (fired is None or n < fired):
                self._consumed.add(n)
                return payload
        if fired is not None:
            return None
        if rec["u"] is not None and rec["u"] <= self._now_ms:
            self._record({"k": "fired", "i": seq})
            return None
        raise _Suspend(WAITING, rec["u"])


_STEP_ID: contextvars.ContextVar[str] = contextvars.ContextVar("asynqpy_durable_step_id", default="")


@dataclass(frozen=True)
class _Pending:
    """A new step to run in this input."""

    seq: int
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    policy: Retry
    attempt: int
    kind: str = "step"


class _Op(Generic[T]):
    """What a ctx operation returns: awaiting it resolves it against the history (and runs a new
    step); ``ctx.gather`` resolves several together."""

    __slots__ = ("ctx", "resolve")

    def __init__(self, ctx: Durable, resolve: Callable[[], Any]) -> None:
        self.ctx, self.resolve = ctx, resolve

    def __await__(self) -> Generator[Any, None, T]:
        return self.ctx._await(self).__await__()


def _seconds(v: timedelta | float | None, what: str) -> float | None:
    """A duration given as a timedelta or seconds (None stays None), checked >= 0."""
    seconds = v.total_seconds() if isinstance(v, timedelta) else v
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0):
        raise InvalidArgumentError(f"{what} takes a timedelta or seconds >= 0, got {v!r}")
    return seconds


def _name(kind: str, name: Any) -> str:
    return f"{kind} {name!r}" if name is not None else kind


async def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    ctx = contextvars.copy_context()
    got = await asyncio.get_running_loop().run_in_executor(None, functools.partial(ctx.run, fn, *args))
    if inspect.isawaitable(got):
        got = await got
    return got


def _now_ms() -> int:
    """The run's time (ms, UTC): Redis's as its worker reckons it (process ``NOW``); else this host's."""
    clock = NOW.get()
    return clock() if clock is not None else int(time.time() * 1000)


def start_args(args: tuple[Any, ...]) -> list[Any]:
    """A run's start arguments as recorded (checked msgpack-able)."""
    out = _wire(list(args), "durable run arguments")
    assert isinstance(out, list)
    return out


__all__ = ["HISTORY_WINDOW", "Durable", "DurableRun", "DeterminismError", "Retry", "RunFailedError",
           "StepFailedError"]
