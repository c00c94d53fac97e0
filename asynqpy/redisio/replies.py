"""What a broker :class:`~asynqpy.core.spine.broker.Call` sends and what its reply means, for the
executors (:mod:`.executor`): the command (EVALSHA, or EVAL after a NOSCRIPT), on a Redis Cluster
the node that serves it and what a node's replies mean (refused unrun: sent again after the slot
map is reloaded; fewer replicas than a ``WAIT`` asked: :class:`NotReplicatedError`), and a reply
or a Redis error as asynqpy's typed result (Redis full, unreachable, the credentials refused, a
script's refusal of an input). No I/O here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterDownError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.model.errors import (
    InvalidArgumentError,
    NotReplicatedError,
    RedisAuthError,
    RedisFullError,
    RedisUnavailableError,
    script_refusal,
)
from ..core.spine.broker import Call
from .connection import is_cluster
from .scripts import load_scripts

FUNCTIONS = os.environ.get("ASYNQPY_SCRIPT_CALLS", "fcall").lower() != "evalsha"
"""Whether executors call scripts as Redis Functions (FCALL of the script's library, loaded once
per server: :mod:`asynqpy.core.spine.library`) before they find the server lacks them, else with
EVALSHA. ``ASYNQPY_SCRIPT_CALLS=evalsha`` makes every executor use EVALSHA (an A/B of the two)."""


def script_args(call: Call[Any], functions: bool) -> tuple[Any, ...]:
    """The command that runs ``call``: FCALL of its script's function if ``functions``, else
    EVALSHA (a call that is no script: its command)."""
    if not call.script:
        return call.command
    script = load_scripts()[call.script]
    if functions:
        return ("FCALL", script.function, len(call.keys), *call.keys, *call.args)
    return ("EVALSHA", script.sha, len(call.keys), *call.keys, *call.args)


def evalsha_args(call: Call[Any]) -> tuple[Any, ...]:
    """The command (EVALSHA for a script call) that runs ``call``."""
    return script_args(call, False)


def load_args(names: Sequence[str]) -> list[tuple[Any, ...]]:
    """The commands loading the libraries of the scripts ``names`` (REPLACE: a library's name holds
    its version, so replacing it replaces it by itself; a loaded one is no error)."""
    scripts = load_scripts()
    return [("FUNCTION", "LOAD", "REPLACE", scripts[n].library) for n in sorted(set(names))]


def function_missing(reply: Any) -> bool:
    """Whether ``reply`` is the error of an FCALL whose function the server does not hold (a fresh
    or restarted server, a new cluster node, a new version): load its library and call again."""
    return isinstance(reply, ResponseError) and "function not found" in str(reply).lower()


def functions_refused(reply: Any) -> bool:
    """Whether ``reply`` says the server or the caller cannot use Redis Functions: a Redis before 7.0
    (FCALL / FUNCTION unknown) or an ACL role without ``+fcall`` / ``+function|load``
    (docs/security.md): scripts go by EVALSHA from then on."""
    if isinstance(reply, NoPermissionError):
        return True
    if not isinstance(reply, ResponseError):  # (before any text: a reply's text is its whole repr, every
        return False                           # message of a dequeue's reply written out and lowercased)
    text = str(reply).lower()
    return "unknown command" in text and ("fcall" in text or "function" in text)


def refused_whole(reply: Any) -> bool:
    """Whether ``reply`` is Redis refusing an FCALL before it ran because Redis is full (a function
    without ``allow-oom``: core/spine/library.py RUN_WHEN_FULL). Nothing ran, so the call goes
    again as an EVALSHA script, which Redis refuses only at its first write that may grow memory:
    a call that stores nothing (its own write sent again after a lost reply, an id conflict)
    replies as it always did (tests/test_state_machine.py redis_full)."""
    return isinstance(reply, OutOfMemoryError)


def missed(reply: Any, functions: bool = False) -> bool:
    """Whether a script call's ``reply`` says it did not run for want of the script or function, or
    (``functions``: it went as FCALL) because Redis refused the function whole (:func:`refused_whole`)."""
    return (isinstance(reply, NoScriptError) or function_missing(reply) or functions_refused(reply)
            or (functions and refused_whole(reply)))


def eval_args(call: Call[Any]) -> tuple[Any, ...]:
    script = load_scripts()[call.script]
    return ("EVAL", script.source, len(call.keys), *call.keys, *call.args)


REDIRECTS = 3
"""Attempts of a call that a cluster node refused without running it (MOVED, ASK, TRYAGAIN,
CLUSTERDOWN: its slot moved or is moving), each after refreshing the slot map."""

_NOT_RUN = (AskError, ClusterDownError, TryAgainError, SlotNotCoveredError)
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)

Wait = tuple[int, int] | None
"""(replicas, timeout ms) of a ``WAIT`` to send after a node's calls, or None."""


_KEYLESS = frozenset({"TIME", "ECHO", "PING", "INFO", "CONFIG", "DBSIZE"})


def _key(call: Call[Any]) -> Any:
    """The key that routes ``call`` to its cluster node; None for a command without keys."""
    if call.script:
        return call.keys[0]
    name = str(call.command[0]).upper()
    if name == "MEMORY":  # MEMORY USAGE <key>
        return call.command[2]
    return None if name in _KEYLESS or len(call.command) < 2 else call.command[1]


def by_node(redis: Any, calls: Sequence[Call[Any]], todo: Sequence[int],
             results: list[Any]) -> tuple[list[tuple[Any, list[int]]], list[int]]:
    """Group the calls ``todo`` (indices) by the cluster node serving their keys: [(node,
    indices)] (one group, node None, for a single-node client), and the indices whose slot no
    node serves right now (their error goes to ``results``)."""
    if not is_cluster(redis):
        return [(None, list(todo))], []
    groups: dict[str, tuple[Any, list[int]]] = {}
    homeless = []
    for i in todo:
        key = _key(calls[i])
        try:
            node = redis.get_default_node() if key is None else redis.get_node_from_key(key)
        except SlotNotCoveredError as exc:
            results[i] = exc
            homeless.append(i)
            continue
        groups.setdefault(node.name, (node, []))[1].append(i)
    return list(groups.values()), homeless


def commands_of(calls: Sequence[Call[Any]], eval_: bool, wait: Wait, functions: bool = False) -> list[tuple[Any, ...]]:
    """The commands of one node's pipeline: each call (EVAL if ``eval_``, else FCALL if
    ``functions``, else EVALSHA), then WAIT if asked."""
    out = [eval_args(c) if eval_ and c.script else script_args(c, functions) for c in calls]
    return out + [("WAIT", *wait)] if wait else out


def no_script(out: list[Any], n: int, functions: bool = False) -> list[int]:
    """The indices of the first ``n`` replies whose script did not run (:func:`missed`)."""
    return [i for i, r in enumerate(out[:n]) if missed(r, functions)]


def merge(out: list[Any], missing: list[int], again: list[Any], wait: Wait) -> list[Any]:
    """One node's replies after its NOSCRIPT calls were sent again with EVAL. With WAIT, the second
    one may have run on another connection: the smaller count holds for all the writes."""
    for i, r in zip(missing, again):
        out[i] = r
    if wait:
        first, second = out[-1], again[-1]
        out[-1] = first if isinstance(first, Exception) else second if isinstance(second, Exception) \
            else min(int(first), int(second))
    return out


def settle(calls: Sequence[Call[Any]], idx: list[int], out: list[Any], wait: Wait, results: list[Any]) -> list[int]:
    """Parse one node's replies ``out`` into ``results``. With ``wait`` (``out``'s last reply is
    WAIT's), a success confirmed by fewer replicas than asked becomes a NotReplicatedError.
    Returns the indices the node refused without running them."""
    refused = []
    short: NotReplicatedError | None = None
    if wait:
        acked = out[-1]
        if isinstance(acked, Exception):
            short = NotReplicatedError(f"written on the master, but WAIT failed: {acked}", 0)
        elif int(acked) < wait[0]:
            short = NotReplicatedError(f"written on the master, but {acked} of {wait[0]} replicas confirmed it",
                                       int(acked))
    for i, reply in zip(idx, out):
        if isinstance(reply, _NOT_RUN):
            refused.append(i)
            results[i] = reply
            continue
        result = parse_reply(calls[i], reply)
        if short is not None and not isinstance(result, Exception):
            result = NotReplicatedError(str(short), short.acked, result)
        results[i] = result
    return refused


def stale(redis: Any, refused: list[int], results: list[Any]) -> bool:
    """Must the cluster slot map be reloaded (a refusal, or a node unreachable: a replica may be
    taking over)?"""
    return is_cluster(redis) and (bool(refused) or any(isinstance(r, _UNREACHABLE) for r in results))


def full_error(exc: OutOfMemoryError) -> RedisFullError:
    err = RedisFullError(f"Redis is full (maxmemory reached), nothing was stored: {exc}")
    err.__cause__ = exc
    return err


def unavailable(exc: BaseException) -> RedisUnavailableError | RedisAuthError | None:
    """``exc`` as a :class:`RedisUnavailableError` (cause kept) if it means Redis could not be
    reached or the connection broke; wrong credentials (the caller's to fix, not an outage) as a
    :class:`RedisAuthError`; else None."""
    if isinstance(exc, (RedisUnavailableError, RedisAuthError)):
        return None
    if isinstance(exc, AuthenticationError):
        auth = RedisAuthError(f"Redis refused the credentials: {exc}")
        auth.__cause__ = exc
        return auth
    if isinstance(exc, (*_UNREACHABLE, RedisClusterException)):
        err = RedisUnavailableError(f"cannot reach Redis: {exc}")
        err.__cause__ = exc
        return err
    return None


def typed_error(exc: BaseException) -> RedisUnavailableError | RedisAuthError | InvalidArgumentError | None:
    """``exc`` as asynqpy's typed error: Redis unreachable or the credentials refused
    (:func:`unavailable`), or a script's refusal of an input (core/model/errors.py script_refusal); else None."""
    return unavailable(exc) or script_refusal(exc)


_BARE_COMMANDS = frozenset({"SADD"})
"""Plain commands whose reply redis-py returns as Redis sent it (no response callback)."""


def bare(call: Call[Any]) -> bool:
    """Whether ``call``'s reply needs no redis-py response callback: a script's, or a command of
    :data:`_BARE_COMMANDS`."""
    return bool(call.script) or (bool(call.command) and call.command[0] in _BARE_COMMANDS)


def parse_reply(call: Call[Any], reply: Any) -> Any:
    if isinstance(reply, OutOfMemoryError):
        return full_error(reply)
    if isinstance(reply, Exception):
        return typed_error(reply) or reply
    try:
        return call.parse(reply)
    except Exception as exc:  # noqa: BLE001 - a typed error for this call alone
        return exc
