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
cancelled and answers True. The notice is also kept in Redis for a minute
(``QueueKeys.durable_cancel``): a server subscribes to the cancel channel a moment after it starts
taking tasks (and again after a lost connection), so a notice published meanwhile never reached it
and the step ran on to its end; each time it has subscribed, it reads the kept notices of the
durable inputs it holds. A request not taken within :data:`KEEP_S` (the step had just ended) is forgotten; the cancel
input ends the run anyway.

A request is the input's, not only the run's: it is kept under (run id, input id) and only that
input (its replay's ``ctx.cancelled``, its :func:`take`) sees it. Kept under the run id alone, a
request outlived its run: a run started again under the same id within :data:`KEEP_S` (after the
cancelled one was removed, or on another Redis) saw ``ctx.cancelled`` True in its first plain step,
which returned early and completed the run, so its own cancel then answered False.
"""

from __future__ import annotations

import time
from typing import Any

import msgpack

NOTICE = "\x00durable-cancel"
"""The first item of a durable cancel notice."""
KEEP_S = 60.0
"""How long a request waits for the run's input to take it (seconds)."""
KEPT_MS = 60_000
"""How long the latest notice of a run is kept in Redis (``QueueKeys.durable_cancel``), for a
server that was not subscribed to the cancel channel when it was published."""

_requested: dict[tuple[str, str], tuple[float, str, bool]] = {}
# (run id, input id) -> (when, reason, taken by the input)


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


def request(run_id: str, input_id: str, reason: str) -> bool:
    """The server running input ``input_id`` of run ``run_id`` was asked to cancel the run (the
    input's handler is cancelled next). False if it was asked already (the notice came twice: over
    the channel and from its key, read after subscribing): nothing to do again."""
    now = time.monotonic()
    for key in [key for key, (at, _, _) in _requested.items() if now - at > KEEP_S]:
        _requested.pop(key, None)
    if (run_id, input_id) in _requested:
        return False
    _requested[(run_id, input_id)] = (now, reason, False)
    return True


def requested(run_id: str, input_id: str) -> str | None:
    """The reason of a request made within KEEP_S to cancel run ``run_id`` while input
    ``input_id`` runs it (None: none): what ``ctx.cancelled`` reads, in the step's thread too after
    its input ended the run."""
    got = _requested.get((run_id, input_id))
    if got is None or time.monotonic() - got[0] > KEEP_S:
        return None
    return got[1]


def take(run_id: str, input_id: str) -> str | None:
    """The reason of a request to input ``input_id`` not taken yet, which this takes (the input
    ends the run)."""
    got = _requested.get((run_id, input_id))
    if got is None or got[2] or time.monotonic() - got[0] > KEEP_S:
        return None
    _requested[(run_id, input_id)] = (got[0], got[1], True)
    return got[1]
