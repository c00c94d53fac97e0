"""The steps the executors' plans yield (:mod:`.executor`: one command, the direct path, one
node's pipeline, the nodes' pipelines, the cluster's slot map) and the helpers that perform them
on redis-py: the direct path's packing and reading, a pipeline, the connections a dropped sync
executor gives back, and the async executor's guard against a lost cancellation.

The async executor does not lose a cancellation: on Python < 3.12, ``asyncio.wait_for`` (which
redis-py's ``send_packed_command`` uses when the client has a ``socket_timeout``) returns the
result, not CancelledError, when the cancel arrives just as the send it waits for completes; the
cancelled task went on as if nothing had happened (a heartbeat went on beating after its server
stopped, and ``asyncio.run`` waited for it forever). A call during which the task was asked to
cancel raises CancelledError (see :func:`_kept`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from hiredis import pack_command
from redis.exceptions import ResponseError

from ..core.spine.broker import Call
from ..core.spine.twin import Steps
from .replies import script_args

T = TypeVar("T")

DIRECT_MAX = 2
"""At most this many calls go by the direct path (:class:`_Direct`: a lone enqueue and its
queue's registration); more go in a redis-py pipeline."""


def _give_back(pool: Any, taken: list[Any], pid: int) -> None:
    """Return the connections a dropped SyncExecutor's threads held (not in a forked child)."""
    if os.getpid() == pid:
        for conn in taken:
            pool.release(conn)
        taken.clear()


def _cancel_requests() -> int:
    """How many times the current task was asked to cancel (``Task.cancelling``: 0 outside a
    task, and on Python 3.10, which does not count them)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


async def _kept(aw: Awaitable[T]) -> T:
    """Await a call into redis-py; if the task was asked to cancel meanwhile and the library
    returned (or raised another error) instead of raising CancelledError, raise it now. (Python <
    3.12's ``asyncio.wait_for``, used by redis-py's ``send_packed_command`` with a
    ``socket_timeout``, drops a cancel that arrives in the same turn of the loop as the completion
    of the send it waits for.)"""
    asked = _cancel_requests()
    try:
        result = await aw
    except Exception as exc:
        if _cancel_requests() > asked:
            raise asyncio.CancelledError() from exc
        raise
    if _cancel_requests() > asked:
        raise asyncio.CancelledError()
    return result


_SCRIPTS = ("FCALL", "EVALSHA", "EVAL")
"""A step that is a tuple: send that one command and read its reply (the sync executor's direct
path takes a script's, :data:`_SCRIPTS`). Raises what the command raised."""


class _Direct:
    """A step: a few calls whose replies need no redis-py callback (:func:`bare`), in one write on
    one connection, each reply read back (a call's error in its place); None when the connection
    failed (the caller sends them again through a pipeline, with the client's retry policy: a resent
    store call recognises its own write, docs/internals-scripts.md "Calls sent again")."""

    __slots__ = ("calls",)

    def __init__(self, calls: Sequence[Call[Any]]) -> None:
        self.calls = calls


class _Pipe:
    """A step: one pipeline (no MULTI, one connection) of ``commands`` on cluster node ``node``
    (None: the client's own server); the replies, an error in place of each that failed. Raises
    when the whole pipeline failed."""

    __slots__ = ("commands", "node")

    def __init__(self, node: Any, commands: list[tuple[Any, ...]]) -> None:
        self.node, self.commands = node, commands


class _Each:
    """A step: run sub-plans (one per cluster node), concurrently in the async executor; their answers."""

    __slots__ = ("plans",)

    def __init__(self, plans: list[Steps[Any]]) -> None:
        self.plans = plans


class _Many:
    """A step: :meth:`run_many` of ``calls`` (the executor's own method, as a caller would call it)."""

    __slots__ = ("calls",)

    def __init__(self, calls: list[Call[Any]]) -> None:
        self.calls = calls


_READY = "ready"
"""A step: the asyncio cluster client's first initialization, one caller at a time (nothing for the
sync client, made initialized)."""
_TOPOLOGY = "topology"
"""A step: load the asyncio cluster client's slot map if not loaded yet (nothing for the sync
client). Raises what the cluster raised."""
_REFRESH = "refresh"
"""A step: reload the cluster's slot map (a moved slot, an unreachable node). Raises what the
cluster raised."""


def _pipeline(client: Any, commands: list[tuple[Any, ...]]) -> Any:
    """A pipeline (no MULTI: one connection) of ``commands`` on a client of one server, to execute."""
    pipe = client.pipeline(transaction=False)
    for args in commands:
        pipe.execute_command(*args)
    return pipe


def _packed(calls: Sequence[Call[Any]], functions: bool) -> bytes:
    """The commands of ``calls`` packed for one write."""
    return b"".join([pack_command(script_args(c, functions)) for c in calls])


def _read(read: Callable[[], Any]) -> Any:
    """A reply read on a connection; a call's error (a ResponseError) in its place, so the next
    reply is read all the same."""
    try:
        return read()
    except ResponseError as exc:
        return exc
