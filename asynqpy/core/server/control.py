"""Remote worker control, sans I/O (docs/workers.md "Remote control"): an operator's command to
one server, delivered through Redis so it works across machines, and acknowledged.

The operator (Inspector.stop_server / quiet_server / resume_server, ``asynqpy server stop|quiet|
resume ID``) checks that the server is alive (its heartbeat in the servers zset), RPUSHes
``[command id, action]`` to the server's control list and PUBLISHes the server's id on the control
channel; then waits on the command's ack list. The server, subscribed to the channel (and
looking at its list at least every few seconds, for a message missed while reconnecting), pops
its commands, applies each and pushes the outcome to the ack list. Actions: ``quiet`` (take no
new task, finish the running ones), ``resume`` (take tasks again), ``stop`` (the graceful
shutdown a SIGTERM starts: running tasks finish or are requeued).
"""

from __future__ import annotations

import secrets
from typing import Any

import msgpack

from ..inspector.inspection import Plan
from ..model.errors import InvalidArgumentError, ServerNotFoundError
from ..spine.broker import Broker, Call
from ..spine.keys import CONTROL_CHANNEL, SERVERS, control_ack, control_list

ACTIONS = ("stop", "quiet", "resume")
TTL_MS = 60_000
MAX_CONCURRENCY = 100_000
"""The most handlers a server may be resized to run at once (``concurrency_action``)."""


def concurrency_action(concurrency: object) -> str:
    """The command that resizes a server to run ``concurrency`` handlers at once (1 to
    :data:`MAX_CONCURRENCY`); InvalidArgumentError otherwise."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise InvalidArgumentError(f"concurrency must be an integer from 1 to {MAX_CONCURRENCY}, got {concurrency!r}")
    return f"concurrency={concurrency}"


def concurrency_of(action: str) -> int | None:
    """N for the command ``concurrency=N`` (valid), else None."""
    name, _, value = action.partition("=")
    if name != "concurrency" or not value.isdigit():
        return None
    n = int(value)
    return n if 1 <= n <= MAX_CONCURRENCY else None


def pack_command(command_id: str, action: str) -> bytes:
    data: bytes = msgpack.packb([command_id, action])
    return data


def unpack_command(raw: bytes) -> tuple[str, str]:
    """(command id, action); ValueError if it is not a command."""
    try:
        got = msgpack.unpackb(raw, raw=False)
        cid, action = str(got[0]), str(got[1])
    except Exception as exc:
        raise ValueError(f"not a control command: {raw!r}") from exc
    return cid, action


def send(b: Broker, server_id: str, action: str) -> Plan[str]:
    """Queue ``action`` for live server ``server_id`` and wake it; returns the command id (its
    acknowledgement arrives on :func:`~asynqpy.core.spine.keys.control_ack`). ServerNotFoundError
    for a server that is not alive."""
    if action not in ACTIONS and concurrency_of(action) is None:
        raise InvalidArgumentError(f"action must be one of {', '.join(ACTIONS)} or concurrency=N, got {action!r}")
    try:
        ok = isinstance(server_id, str) and bool(server_id) and bool(server_id.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        ok = False
    if not ok:
        raise InvalidArgumentError(f"a server id is a non-empty string of text, got {server_id!r}")
    res = yield [Call(lambda r: r, command=("ZSCORE", SERVERS, server_id))]
    expiry = res[0]
    if isinstance(expiry, Exception):
        raise expiry
    if expiry is None or float(expiry) < b.clock.now_ms():
        raise ServerNotFoundError(f"no live server {server_id!r} (see asynqpy server ls)")
    cid = secrets.token_hex(8)
    key = control_list(server_id)
    res = yield [Call(lambda r: r, command=("RPUSH", key, pack_command(cid, action))),
                 Call(lambda r: r, command=("PEXPIRE", key, TTL_MS)),
                 Call(lambda r: r, command=("PUBLISH", CONTROL_CHANNEL, server_id))]
    for r in res[:1]:
        if isinstance(r, Exception):
            raise r
    return cid


def ack_calls(command_id: str, outcome: str) -> list[Call[Any]]:
    """The server's acknowledgement of a command: its outcome pushed to the ack list."""
    key = control_ack(command_id)
    return [Call(lambda r: r, command=("RPUSH", key, outcome)), Call(lambda r: r, command=("PEXPIRE", key, TTL_MS))]
