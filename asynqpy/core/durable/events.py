"""A durable run's operations in its queue's lifecycle event stream (docs/durable.md "Operating
runs"; the stream: :mod:`asynqpy.core.results.events`).

The worker commits a run's input (``proc_commit``), then, in the same pipeline, ``durable_emit``
(lua/durable_emit.lua) writes one stream entry per operation the input recorded, only if the
commit happened. Each entry's ``id`` is the run's id and its ``type`` the run's process type
(``durable.<function>``):

- ``durable_step``: a step's or task's attempt ended: ``outcome`` ``completed``, ``failed`` (its
  final failure) or ``retrying`` (``due``: the next attempt), ``attempt``, ``error``, ``value``
  ``{"step": name, "i": position, "ms": how long the attempt ran}``;
- ``durable_sleep`` (``due``: its end), ``durable_wait`` (``value`` ``{"signal": name}``; ``due``:
  its timeout), ``durable_signal`` (a signal the run got: ``value`` ``{"signal": name}``);
- ``durable_end``: ``outcome`` ``completed``, ``failed`` (``error``) or ``cancelled``;
  ``durable_resume``: a resume took the run back.
"""

from __future__ import annotations

import time
from typing import Any

import msgpack

from ..spine.broker import Call
from ..spine.calls import script_call
from ..spine.keys import queue_keys
from .replay import TYPE_PREFIX

__all__ = ["EVENTS", "TYPE_PREFIX", "emit_call", "emit_items", "entry", "step_times"]

EVENTS = ("durable_step", "durable_sleep", "durable_wait", "durable_signal", "durable_end", "durable_resume")
"""The stream's durable events."""
_ENDS = {"done": "completed", "failed": "failed", "cancelled": "cancelled"}


def _first_line(text: Any) -> str:
    return str(text or "").split("\n", 1)[0][:500]


def _value(v: Any) -> bytes:
    return msgpack.packb(v, use_bin_type=True)  # type: ignore[no-any-return]


def _step(e: dict[str, Any], base: list[Any], now_ms: int) -> list[Any]:
    k, start = e.get("k"), e.get("s")
    ms = now_ms - start if isinstance(start, int) else None
    outcome = "retrying" if k == "try" else "failed" if "e" in e else "completed"
    out = ["e", "durable_step", *base, "outcome", outcome, "attempt", str(int(e.get("a", 1)))]
    if "e" in e:
        out += ["error", _first_line(e["e"])]
    if k == "try" and isinstance(e.get("at"), int):
        out += ["due", str(e["at"])]
    return out + ["value", _value({"step": e.get("n"), "i": e.get("i"), "ms": ms})]


def _wait(e: dict[str, Any], base: list[Any]) -> list[Any]:
    due = ["due", str(e["u"])] if isinstance(e.get("u"), int) else []
    return ["e", "durable_wait", *base, *due, "value", _value({"signal": e.get("n"), "i": e.get("i")})]


def _end(e: dict[str, Any], base: list[Any]) -> list[Any]:
    k = str(e.get("k"))
    out = ["e", "durable_end", *base, "outcome", _ENDS[k]]
    return out + (["error", _first_line(e.get("e") or e.get("reason"))] if k != "done" else [])


def entry(run_id: str, ptype: str, e: dict[str, Any], now_ms: int) -> list[Any] | None:
    """The stream entry (field, value, ...) of one recorded event, or None (not an operation an
    operator follows: a recorded value, a fired timer, a task's internal signal)."""
    k = e.get("k")
    base: list[Any] = ["id", run_id, "type", ptype]
    if k in ("step", "task", "try"):
        return _step(e, base, now_ms)
    if k == "sleep":
        return ["e", "durable_sleep", *base, "due", str(e.get("u")), "value", _value({"i": e.get("i")})]
    if k == "wait":
        return _wait(e, base)
    if k == "signal" and not str(e.get("n", "")).startswith("\x00"):
        return ["e", "durable_signal", *base, "value", _value({"signal": e.get("n")})]
    if k in _ENDS:
        return _end(e, base)
    return ["e", "durable_resume", *base] if k == "resume" else None


def _decoded(events: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for raw in events:
        try:
            e = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException):
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def step_times(events: list[bytes], now_ms: int) -> list[tuple[str, float]]:
    """(outcome, seconds) of each step attempt the events (as encoded for ``proc_commit``) record:
    the worker's ``asynqpy_durable_step_seconds``."""
    out = []
    for e in _decoded(events):
        if e.get("k") in ("step", "task", "try") and isinstance(e.get("s"), int):
            outcome = "retrying" if e["k"] == "try" else "failed" if "e" in e else "completed"
            out.append((outcome, (now_ms - e["s"]) / 1000))
    return out


def emit_items(input_id: str, ptype: str, run_id: str, events: list[bytes]) -> list[Any]:
    """The items of ``durable_emit`` for the events (as encoded for ``proc_commit``) one input of
    run ``run_id`` recorded: its id, their count, its entries; [] when none is an operation."""
    if not ptype.startswith(TYPE_PREFIX) or not events:
        return []
    now_ms = int(time.time() * 1000)
    fields: list[Any] = []
    for e in _decoded(events):
        got = entry(run_id, ptype, e, now_ms)
        if got is not None:
            fields += [str(len(got)), *got]
    return [input_id, str(len(fields)), *fields] if fields else []


def emit_call(queue: str, items: list[Any]) -> Call[int] | None:
    """The ``durable_emit`` call of the inputs of one queue (each its :func:`emit_items`,
    concatenated), or None when there is none."""
    if not items:
        return None
    q = queue_keys(queue)
    return script_call("durable_emit", int, tasks=q.tasks, events=q.events, conf=q.conf, inputs=items)
