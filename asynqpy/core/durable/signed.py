"""Signed durable runs (docs/durable.md "Signing"; issue 46: "no step result or signal enters a
signed run unverified").

A run's inputs (its start, signals, cancellation, the ends of its tasks and child runs, which
reach it as internal signals) are task messages: a worker with signing keys verifies each before
it runs it, as any task. What the worker then writes into the run's history (the start, a
signal, a step's result or error, a sleep, ...) lives beside the signed messages, in the queue's
history hash, where a Redis writer could add or change an event. So a worker with keys tags each
event it writes (checkpointed or committed): ``sig``, an HMAC-SHA256 of the event's encoding
without it, bound to the queue, the run's id and the event's number (``signing.HISTORY_DOMAIN``),
and verifies every event of the history it reads before the replay sees it. An event that does
not verify (forged, altered, moved from another run or position, or written by a worker without
keys) stops the run: the input fails with :class:`ForgedHistoryError` (a ``SignatureError``, not
retried), is archived, and the run's process is marked ``error`` (``client.result`` raises
RunFailedError ``stopped in error``); nothing of the forged event is used.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..model import codec
from ..model.errors import SignatureError, SkipRetry
from ..processes.model import Step
from ..security.signing import HISTORY_DOMAIN, Signer

SIG = "sig"
"""The key of an event's tag in the event (a dict)."""


class ForgedHistoryError(SignatureError, SkipRetry):
    """A signed run's history holds an event whose tag is missing or wrong (written by something
    other than a worker holding the signing keys): the run stops in ``error``."""


def _body(e: dict[str, Any]) -> bytes:
    return codec.encode_payload({k: v for k, v in e.items() if k != SIG}, "event")


def seal_events(signer: Signer, queue: str, pid: str, after: int, events: Any) -> Any:
    """``events`` (appended after event number ``after``), each a copy with its tag."""
    if isinstance(events, (str, bytes)) or not isinstance(events, (list, tuple)):
        return events  # (a malformed Step: plan_step says so)
    out: list[Any] = []
    for n, e in enumerate(events, after + 1):
        if isinstance(e, dict):
            e = {**{k: v for k, v in e.items() if k != SIG}, SIG: signer.tag(queue, f"{pid}:{n}", _body(e),
                                                                             HISTORY_DOMAIN)}
        out.append(e)
    return out


def seal_step(signer: Signer, queue: str, pid: str, after: int, step: Any) -> Any:
    """A run's ``Step`` with its events tagged (numbered from ``after + 1``: the record's count)."""
    if not isinstance(step, Step):
        return step
    return replace(step, events=seal_events(signer, queue, pid, after, step.events))


def open_history(signer: Signer, queue: str, proc: Any) -> Any:
    """The run (a ``Process``) with every event of its history verified and its tag taken off;
    raises :class:`ForgedHistoryError` naming the first event that does not verify."""
    history = []
    for e in proc.history:
        data = e.data
        tag = data.get(SIG) if isinstance(data, dict) else None
        if not isinstance(tag, bytes) or not signer.verifies(queue, f"{proc.id}:{e.id}", _body(data), tag,
                                                             HISTORY_DOMAIN):
            what = data.get("k") if isinstance(data, dict) else type(data).__name__
            raise ForgedHistoryError(
                f"bad signature: event {e.id} ({what}) of durable run {proc.id!r} in queue {queue!r} is "
                f"{'not signed' if tag is None else 'signed with none of the signing keys'}: the run stops "
                f"(an event written into its history by other than a worker with the keys)")
        history.append(replace(e, data={k: v for k, v in data.items() if k != SIG}))
    return replace(proc, history=history)


__all__ = ["SIG", "ForgedHistoryError", "open_history", "seal_events", "seal_step"]
