"""Cooperative cancellation of a durable run's running step (docs/durable.md "Operating runs").

``client.cancel(run)`` sends the run a ``cancel`` input, which waits in line behind the input
running now. So that a long step does not run on, the client first looks up the input holding the
run's turn (its key's holder) and, if it is active, publishes a *durable cancel notice* on the
cancel channel (``[NOTICE, queue, input id, lease token, run id, reason]``; a server of an older
version reads its queue as ``NOTICE`` and finds nothing to cancel). The server running that input
records the request here (:func:`request`) and cancels the input's handler: an async step gets
``asyncio.CancelledError`` (it may clean up; a ``finally`` runs); a plain step running in a thread
cannot be interrupted: the input stops waiting for it and the step sees ``ctx.cancelled`` become
True (it should look and return; what it returns is not used). The durable processor then ends
the run ``cancelled`` in that input's own commit, and the cancel input that follows finds it
cancelled and answers True. A request not taken within :data:`KEEP_S` (the step had just ended) is forgotten; the cancel
input ends the run anyway.
"""

from __future__ import annotations

import time
from typing import Any

import msgpack

NOTICE = "\x00durable-cancel"
"""The first item of a durable cancel notice."""
KEEP_S = 60.0
"""How long a request waits for the run's input to take it (seconds)."""

_requested: dict[str, tuple[float, str, bool]] = {}  # run id -> (when, reason, taken by its input)


def notice(queue: str, input_id: str, token: str, run_id: str, reason: str) -> bytes:
    return msgpack.packb([NOTICE, queue, input_id, token, run_id, reason],  # type: ignore[no-any-return]
                         unicode_errors="surrogateescape")


def parse(items: Any) -> tuple[str, str, str, str, str] | None:
    """(queue, input id, token, run id, reason) of a durable cancel notice (unpacked), else None."""
    if not isinstance(items, list) or len(items) < 6 or items[0] != NOTICE:
        return None
    if not all(isinstance(v, str) for v in items[1:6]):
        return None
    return items[1], items[2], items[3], items[4], items[5]


def request(run_id: str, reason: str) -> None:
    """The server running run ``run_id``'s input was asked to cancel it (its handler is cancelled next)."""
    now = time.monotonic()
    for rid in [rid for rid, (at, _, _) in _requested.items() if now - at > KEEP_S]:
        _requested.pop(rid, None)
    _requested[run_id] = (now, reason, False)


def requested(run_id: str) -> str | None:
    """The reason of a request to cancel run ``run_id`` made within KEEP_S (None: none): what
    ``ctx.cancelled`` reads, in the step's thread too after its input ended the run."""
    got = _requested.get(run_id)
    if got is None or time.monotonic() - got[0] > KEEP_S:
        return None
    return got[1]


def take(run_id: str) -> str | None:
    """The reason of a request not taken yet, which this takes (the input that ends the run)."""
    got = _requested.get(run_id)
    if got is None or got[2] or time.monotonic() - got[0] > KEEP_S:
        return None
    _requested[run_id] = (got[0], got[1], True)
    return got[1]
