"""Traces of durable runs (docs/tracing.md "Durable runs"; issue 46: "one trace per run, a span per
step"), through the tracing hook (:mod:`asynqpy.core.spine.tracing`: nothing happens until
``asynqpy.otel.instrument()`` installs one).

Each input of a run (its replay) is a span ``durable <function>``; the first input's span starts
the run's trace (a child of the span current then: the start's consumer span) and its trace
context is kept in the run's state (``trace``), so every later input, on any worker, is a child
of it: one trace id per run, across replays, workers and crashes. Each operation the input does
(a step's or a task's or child's attempt, a sleep or a wait recorded) is a span
``durable.<op> <name>`` under the input's span, current while a step's body runs (its own spans,
and the send of a ``ctx.task``, nest under it). Operations replayed from the history are not
spans again: they did not happen again.
"""

from __future__ import annotations

import contextvars
from typing import Any

from ..spine import tracing

TRACE = "trace"
"""The key of the run's trace context in its state."""

_INPUT: contextvars.ContextVar[Any] = contextvars.ContextVar("asynqpy_durable_input_span", default=None)


def stored(state: Any) -> dict[str, str] | None:
    got = state.get(TRACE) if isinstance(state, dict) else None
    return got if isinstance(got, dict) and got else None


def input_started(queue: str, run_id: str, function: str, op: str, state: Any) -> tuple[Any, dict[str, str] | None]:
    """Start an input's span (None when nothing traces): (handle, the trace context the run keeps
    from now on if it kept none)."""
    t = tracing.current
    if t is None:
        return None, None
    handle, carrier = t.durable_input(queue, run_id, function, op, stored(state))
    return (t, handle, _INPUT.set(handle)), carrier


def input_ended(h: Any, error: BaseException | None, step: Any) -> None:
    if h is None:
        return
    t, handle, token = h
    _INPUT.reset(token)
    state = getattr(step, "state", None)
    t.durable_input_end(handle, error, str(state.get("status", "")) if isinstance(state, dict) else "")


def kept(step: Any, carrier: dict[str, str] | None) -> Any:
    """The input's step with the run's trace context added to its state (a first input's)."""
    state = getattr(step, "state", None)
    if carrier and isinstance(state, dict) and TRACE not in state:
        step.state = {**state, TRACE: carrier}
    return step


def op_started(op: str, name: str | None, position: int, **attributes: Any) -> Any:
    """Start an operation's span under the input's (None when nothing traces)."""
    t, parent = tracing.current, _INPUT.get()
    if t is None or parent is None:
        return None
    return t, t.durable_op(parent, op, name, position, attributes)


def op_ended(h: Any, error: BaseException | None = None) -> None:
    if h is not None:
        h[0].durable_op_end(h[1], error)


def op_instant(op: str, name: str | None, position: int, **attributes: Any) -> None:
    """An operation recorded without running anything (a sleep, a wait): a span that ends at once."""
    op_ended(op_started(op, name, position, **attributes))


__all__ = ["TRACE", "input_ended", "input_started", "kept", "op_ended", "op_instant", "op_started", "stored"]
