"""Runs broker :class:`~asynqpy.broker.Call` objects on a Redis client, sync or async.

Scripts run with EVALSHA; a NOSCRIPT reply (a fresh or restarted server, a new cluster node) falls
back to EVAL of the same source, which also caches it on that node. Pipelines do not ask
SCRIPT EXISTS first (redis-py's Script objects would, costing a round trip per pipeline).
The two executors share everything but the ``await``s.

On a Redis Cluster, a batch of calls goes out as one pipeline per master (each call to the master
serving its keys' slot), not through redis-py's cluster pipeline, which on one node's failure
closes every connection of the client and loses the replies of the nodes that did answer. A call
refused unrun (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) is sent again after the slot map is reloaded;
an unreachable node also reloads it, so calls follow a replica promoted in a failover.

``run_many_replicated`` is the write path of a client with ``wait_replicas``: each node's calls
are pipelined on one connection of that node, followed by ``WAIT n timeout`` on that same
connection (WAIT counts the replicas that have every write *of its connection* so far).

The async executor does not lose a cancellation: on Python < 3.12, ``asyncio.wait_for`` (which
redis-py's ``send_packed_command`` uses when the client has a ``socket_timeout``) returns the
result, not CancelledError, when the cancel arrives just as the send it waits for completes; the
cancelled task went on as if nothing had happened (a heartbeat went on beating after its server
stopped, and ``asyncio.run`` waited for it forever). A call during which the task was asked to
cancel raises CancelledError (see :func:`_kept`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Generator, Sequence
from typing import Any, TypeVar

from hiredis import pack_command
from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterDownError,
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
from .connection import REDIS_ERRORS, is_cluster
from .scripts import load_scripts

T = TypeVar("T")
log = logging.getLogger("asynqpy.executor")


def evalsha_args(call: Call[Any]) -> tuple[Any, ...]:
    """The command (EVALSHA for a script call) that runs ``call``."""
    if not call.script:
        return call.command
    script = load_scripts()[call.script]
    return ("EVALSHA", script.sha, len(call.keys), *call.keys, *call.args)


def _eval(call: Call[Any]) -> tuple[Any, ...]:
    script = load_scripts()[call.script]
    return ("EVAL", script.source, len(call.keys), *call.keys, *call.args)


def _pipeline(redis: Any, calls: Sequence[Call[Any]]) -> Any:
    """One pipeline (no MULTI) of ``calls`` on a single-node client."""
    pipe = redis.pipeline(transaction=False)
    for call in calls:
        pipe.execute_command(*evalsha_args(call))
    return pipe


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


def _by_node(redis: Any, calls: Sequence[Call[Any]], todo: Sequence[int],
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


def _commands(calls: Sequence[Call[Any]], eval_: bool, wait: Wait) -> list[tuple[Any, ...]]:
    """The commands of one node's pipeline: each call (EVAL instead of EVALSHA if ``eval_``),
    then WAIT if asked."""
    out = [_eval(c) if eval_ and c.script else evalsha_args(c) for c in calls]
    return out + [("WAIT", *wait)] if wait else out


def _no_script(out: list[Any], n: int) -> list[int]:
    return [i for i, r in enumerate(out[:n]) if isinstance(r, NoScriptError)]


def _merge(out: list[Any], missing: list[int], again: list[Any], wait: Wait) -> list[Any]:
    """One node's replies after its NOSCRIPT calls were sent again with EVAL. With WAIT, the second
    one may have run on another connection: the smaller count holds for all the writes."""
    for i, r in zip(missing, again):
        out[i] = r
    if wait:
        first, second = out[-1], again[-1]
        out[-1] = first if isinstance(first, Exception) else second if isinstance(second, Exception) \
            else min(int(first), int(second))
    return out


def _settle(calls: Sequence[Call[Any]], idx: list[int], out: list[Any], wait: Wait, results: list[Any]) -> list[int]:
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
        result = _parse(calls[i], reply)
        if short is not None and not isinstance(result, Exception):
            result = NotReplicatedError(str(short), short.acked, result)
        results[i] = result
    return refused


def _stale(redis: Any, refused: list[int], results: list[Any]) -> bool:
    """Must the cluster slot map be reloaded (a refusal, or a node unreachable: a replica may be
    taking over)?"""
    return is_cluster(redis) and (bool(refused) or any(isinstance(r, _UNREACHABLE) for r in results))


def _refresh(initialize: Any) -> None:
    """Reload a sync cluster client's slot map (a failure is only logged: the next call retries)."""
    try:
        initialize()
    except REDIS_ERRORS as exc:
        log.warning("could not reload the cluster's slot map: %s", exc)


def _full(exc: OutOfMemoryError) -> RedisFullError:
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


def _typed(exc: BaseException) -> RedisUnavailableError | RedisAuthError | InvalidArgumentError | None:
    """``exc`` as asynqpy's typed error: Redis unreachable or the credentials refused
    (:func:`unavailable`), or a script's refusal of an input (core/model/errors.py script_refusal); else None."""
    return unavailable(exc) or script_refusal(exc)


DIRECT_MAX = 2
"""At most this many calls go by :meth:`SyncExecutor._direct_many` (a lone enqueue and its
queue's registration); more go in a redis-py pipeline."""

_BARE_COMMANDS = frozenset({"SADD"})
"""Plain commands whose reply redis-py returns as Redis sent it (no response callback)."""


def _bare(call: Call[Any]) -> bool:
    """Whether ``call``'s reply needs no redis-py response callback: a script's, or a command of
    :data:`_BARE_COMMANDS`."""
    return bool(call.script) or (bool(call.command) and call.command[0] in _BARE_COMMANDS)


def _parse(call: Call[Any], reply: Any) -> Any:
    if isinstance(reply, OutOfMemoryError):
        return _full(reply)
    if isinstance(reply, Exception):
        return _typed(reply) or reply
    try:
        return call.parse(reply)
    except Exception as exc:  # noqa: BLE001 - a typed error for this call alone
        return exc


def _give_back(pool: Any, taken: list[Any], pid: int) -> None:
    """Return the connections a dropped SyncExecutor's threads held (not in a forked child)."""
    if os.getpid() == pid:
        for conn in taken:
            pool.release(conn)
        taken.clear()


class SyncExecutor:
    """Runs calls on a synchronous redis-py client (``redis.Redis`` or ``redis.RedisCluster``).

    Single script calls on a plain ``redis.Redis`` take a fast path: each thread keeps one connection of
    the client's pool and talks to it directly, skipping redis-py's per-command machinery (about
    40 µs a call). Any connection error drops that connection and retries once through the
    client, which reconnects as usual (through a Sentinel-managed pool: to the current master; a
    demoted master's READONLY reply counts as a connection error).

    On a cluster, :meth:`run_many` sends one pipeline per master, concurrently in the async twin,
    rather than redis-py's cluster pipeline: a master that is down (or failing over) fails only the
    calls of its slots, and the slot map is reloaded, not every connection of the client closed."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self._fast = type(redis).__name__ == "Redis" and hasattr(redis, "connection_pool")
        self._cluster = is_cluster(redis)
        self._local = threading.local()
        self._taken: list[Any] = []  # the connections threads hold: back to the pool when this is dropped
        if self._fast:
            weakref.finalize(self, _give_back, redis.connection_pool, self._taken, os.getpid())

    def _conn(self) -> Any:
        held = getattr(self._local, "held", None)
        if held is None or held[0] != os.getpid():
            held = (os.getpid(), self.redis.connection_pool.get_connection())
            self._local.held = held
            self._taken.append(held[1])
        return held[1]

    def _release(self, conn: Any) -> None:
        self._local.held = None
        if conn in self._taken:
            self._taken.remove(conn)
        self.redis.connection_pool.release(conn)

    def _direct(self, args: tuple[Any, ...]) -> Any:
        conn = self._conn()
        try:
            conn.send_packed_command([pack_command(args)])
            return conn.read_response()
        except (RedisConnectionError, RedisTimeoutError, OSError):
            conn.disconnect()
            self._release(conn)
            return self.redis.execute_command(*args)  # retried with the client's own policy

    def _direct_many(self, calls: Sequence[Call[Any]]) -> list[Any] | None:
        """A few calls whose replies need no response callback (:func:`_bare`: a queue's
        registration and the script storing its task) in one write on this thread's connection,
        each reply read back: what a redis-py pipeline does, without its bookkeeping (about 100 µs
        of CPU for two commands, as much as the rest of an enqueue). None when the connection
        failed: the caller sends them again through the pipeline, with the client's retry policy
        (a resent store call recognises its own write: docs/internals-scripts.md "Calls sent again")."""
        conn = self._conn()
        replies: list[Any] = []
        try:
            conn.send_packed_command([b"".join(  # (one write: a list is sent an item at a time)
                [pack_command(evalsha_args(c) if c.script else c.command) for c in calls])])
            for _ in calls:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:  # (this call's error; the next reply is read all the same)
                    replies.append(exc)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            conn.disconnect()
            self._release(conn)
            return None
        return self._parsed(calls, replies)

    def _send(self, call: Call[Any]) -> Any:
        # script replies need no response callbacks; plain commands keep redis-py's parsing
        run = self._direct if self._fast and call.script else (lambda args: self.redis.execute_command(*args))
        try:
            return run(evalsha_args(call))
        except NoScriptError:
            return run(_eval(call))

    def close(self) -> None:
        """Give this thread's connection back to the pool (those of other threads go back when the
        executor is dropped)."""
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == os.getpid():
            self._release(held[1])
        self._local.held = None

    def run(self, call: Call[T]) -> T:
        """Run one call; its parser's typed error (or the Redis error) is raised; a Redis at
        maxmemory refusing the call raises :class:`RedisFullError`; Redis unreachable (or the
        connection broken), :class:`RedisUnavailableError`."""
        try:
            reply = self._send(call)
        except OutOfMemoryError as exc:
            raise _full(exc) from exc
        except Exception as exc:
            err = _typed(exc)
            if err is None:
                raise
            raise err from exc
        return call.parse(reply)

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Run calls in one pipeline (no MULTI). Each result is the parsed reply or the exception
        that call raised; one call failing does not stop the others."""
        try:
            return self._run_many(calls)
        except Exception as exc:
            err = _typed(exc)
            if err is None:
                raise
            raise err from exc

    def _parsed(self, calls: Sequence[Call[Any]], replies: list[Any]) -> list[Any]:
        """Each call's parsed reply (or error); a script Redis did not know (NOSCRIPT) is sent
        again on its own (:meth:`_send` loads it)."""
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                try:
                    replies[i] = self._send(calls[i])
                except Exception as exc:  # noqa: BLE001 - reported per call
                    replies[i] = exc
        return [_parse(c, r) for c, r in zip(calls, replies)]

    def _run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if not calls:
            return []
        if self._cluster:
            return self._per_node(calls, None)
        if len(calls) == 1 and self._fast and calls[0].script:  # the direct path, no pipeline
            return [self._run_one(calls[0])]
        if self._fast and len(calls) <= DIRECT_MAX and all(_bare(c) for c in calls):
            direct = self._direct_many(calls)
            if direct is not None:
                return direct
        replies = _pipeline(self.redis, calls).execute(raise_on_error=False)
        return self._parsed(calls, replies)

    def _run_one(self, call: Call[Any]) -> Any:
        """One script call on the direct path: its parsed reply, or the error it raised."""
        try:
            return _parse(call, self._send(call))
        except Exception as exc:  # noqa: BLE001 - reported per call
            return _parse(call, exc)

    def _node_send(self, node: Any, calls: list[Call[Any]], wait: Wait) -> list[Any]:
        """One pipeline (one connection) on ``node`` (None: the single-node client) for ``calls``
        and the WAIT; NOSCRIPT replies are sent again with EVAL. Never raises: a failure is
        every reply."""
        client = self.redis if node is None else self.redis.get_redis_connection(node)

        def send(cs: list[Call[Any]], eval_: bool) -> list[Any]:
            commands = _commands(cs, eval_, wait)
            pipe = client.pipeline(transaction=False)
            for args in commands:
                pipe.execute_command(*args)
            try:
                return list(pipe.execute(raise_on_error=False))
            except Exception as exc:  # noqa: BLE001 - the outcome of these calls is unknown
                return [exc] * len(commands)

        out = send(calls, False)
        missing = _no_script(out, len(calls))
        return _merge(out, missing, send([calls[i] for i in missing], True), wait) if missing else out

    def _per_node(self, calls: Sequence[Call[Any]], wait: Wait) -> list[Any]:
        """Run ``calls`` as one pipeline per node; see :func:`_settle` for what each result is."""
        results: list[Any] = [None] * len(calls)
        todo: list[int] = list(range(len(calls)))
        for _ in range(REDIRECTS):
            groups, refused = _by_node(self.redis, calls, todo, results)
            for node, idx in groups:
                refused += _settle(calls, idx, self._node_send(node, [calls[i] for i in idx], wait), wait, results)
            if _stale(self.redis, refused, results):
                _refresh(self.redis.nodes_manager.initialize)
            if not refused:
                break
            todo = refused
        return results

    def run_many_replicated(self, calls: Sequence[Call[Any]], replicas: int, timeout_ms: int) -> list[Any]:
        """Like :meth:`run_many`, and each successful call is confirmed by ``WAIT replicas
        timeout_ms`` on the connection that ran it, else its result is a NotReplicatedError."""
        return self._per_node(calls, (replicas, timeout_ms)) if calls else []


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


class AsyncExecutor:
    """Runs calls on an asyncio redis-py client (``redis.asyncio.Redis`` or ``RedisCluster``).
    A call during which its task was asked to cancel raises CancelledError, even where redis-py
    lost the cancellation (:func:`_kept`)."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self._cluster = is_cluster(redis)
        self._ready = not self._cluster
        self._init_lock: asyncio.Lock | None = None
        # a redis-py client of one server (not a cluster, not fakeredis): _direct_many
        self._fast = type(redis).__name__ == "Redis" and type(redis).__module__.startswith("redis.")

    async def _initialized(self) -> None:
        """A cluster client's first commands, sent by many coroutines at once, each load the
        cluster's topology and disconnect the connections the others are writing on (redis-py's
        asyncio RedisCluster; AttributeError: 'NoneType' object has no attribute 'writelines'):
        the first caller initializes it while the others wait."""
        if self._init_lock is None:
            self._init_lock = asyncio.Lock()
        async with self._init_lock:
            if not self._ready:
                await self.redis.initialize()
                self._ready = True

    async def _send(self, call: Call[Any]) -> Any:
        if not self._ready:
            await self._initialized()
        try:
            return await self.redis.execute_command(*evalsha_args(call))
        except NoScriptError:
            return await self.redis.execute_command(*_eval(call))

    async def run(self, call: Call[T]) -> T:
        """Async twin of :meth:`SyncExecutor.run`."""
        try:
            reply = await _kept(self._send(call))
        except OutOfMemoryError as exc:
            raise _full(exc) from exc
        except Exception as exc:
            err = _typed(exc)
            if err is None:
                raise
            raise err from exc
        return call.parse(reply)

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Async twin of :meth:`SyncExecutor.run_many`."""
        try:
            return await _kept(self._run_many(calls))
        except Exception as exc:
            err = _typed(exc)
            if err is None:
                raise
            raise err from exc

    async def _run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if not calls:
            return []
        if self._cluster:
            if not self._ready:
                await self._initialized()
            return await self._per_node(calls, None)
        if self._fast and len(calls) <= DIRECT_MAX and all(_bare(c) for c in calls):
            direct = await self._direct_many(calls)
            if direct is not None:
                return direct
        replies = await _pipeline(self.redis, calls).execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                try:
                    replies[i] = await self._send(calls[i])
                except Exception as exc:  # noqa: BLE001 - reported per call
                    replies[i] = exc
        return [_parse(c, r) for c, r in zip(calls, replies)]

    async def _direct_many(self, calls: Sequence[Call[Any]]) -> list[Any] | None:
        """Async twin of :meth:`SyncExecutor._direct_many` (a pooled connection; one that a
        failure or a cancellation leaves with replies unread is disconnected, never reused)."""
        pool = self.redis.connection_pool
        conn = await pool.get_connection()
        replies: list[Any] = []
        try:
            await conn.send_packed_command(b"".join(
                [pack_command(evalsha_args(c) if c.script else c.command) for c in calls]))
            for _ in calls:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:  # (this call's error; the next reply is read all the same)
                    replies.append(exc)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await conn.disconnect()
            return None
        except BaseException:
            await asyncio.shield(conn.disconnect())
            raise
        finally:
            await asyncio.shield(pool.release(conn))
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                try:
                    replies[i] = await self._send(calls[i])
                except Exception as exc:  # noqa: BLE001 - reported per call
                    replies[i] = exc
        return [_parse(c, r) for c, r in zip(calls, replies)]

    async def _node_send(self, node: Any, calls: list[Call[Any]], wait: Wait) -> list[Any]:
        """Async twin of :meth:`SyncExecutor._node_send`."""
        from redis.asyncio.cluster import PipelineCommand

        async def send(cs: list[Call[Any]], eval_: bool) -> list[Any]:
            commands = _commands(cs, eval_, wait)
            try:
                if node is None:
                    pipe = self.redis.pipeline(transaction=False)  # one connection
                    for args in commands:
                        pipe.execute_command(*args)
                    return list(await pipe.execute(raise_on_error=False))
                cmds = [PipelineCommand(i, *args) for i, args in enumerate(commands)]
                await node.execute_pipeline(cmds)  # one connection of that node
                return [c.result for c in cmds]
            except Exception as exc:  # noqa: BLE001 - the outcome of these calls is unknown
                return [exc] * len(commands)

        out = await send(calls, False)
        missing = _no_script(out, len(calls))
        return _merge(out, missing, await send([calls[i] for i in missing], True), wait) if missing else out

    async def _per_node(self, calls: Sequence[Call[Any]], wait: Wait) -> list[Any]:
        """Async twin of :meth:`SyncExecutor._per_node`; the nodes are sent to concurrently."""
        if is_cluster(self.redis):
            try:
                await self.redis.initialize()  # a no-op once the slot map is loaded
            except REDIS_ERRORS as exc:
                return [exc] * len(calls)
        results: list[Any] = [None] * len(calls)
        todo: list[int] = list(range(len(calls)))
        for _ in range(REDIRECTS):
            groups, refused = _by_node(self.redis, calls, todo, results)
            outs = await asyncio.gather(*(self._node_send(node, [calls[i] for i in idx], wait) for node, idx in groups))
            for (_, idx), out in zip(groups, outs):
                refused += _settle(calls, idx, out, wait, results)
            if _stale(self.redis, refused, results):
                try:
                    await self.redis.nodes_manager.initialize()
                except REDIS_ERRORS as exc:
                    log.warning("could not reload the cluster's slot map: %s", exc)
            if not refused:
                break
            todo = refused
        return results

    async def run_many_replicated(self, calls: Sequence[Call[Any]], replicas: int, timeout_ms: int) -> list[Any]:
        """Async twin of :meth:`SyncExecutor.run_many_replicated`."""
        if not calls:
            return []
        if not self._ready:
            await _kept(self._initialized())
        return await _kept(self._per_node(calls, (replicas, timeout_ms)))


def run_plan(executor: SyncExecutor, plan: Generator[list[Call[Any]], list[Any], T]) -> T:
    """Drive a plan (:mod:`asynqpy.core.inspector.inspection`): each round trip it yields, run in one
    pipeline; returns its answer."""
    try:
        calls = next(plan)
        while True:
            calls = plan.send(executor.run_many(calls))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def arun_plan(executor: AsyncExecutor, plan: Generator[list[Call[Any]], list[Any], T]) -> T:
    """Async twin of :func:`run_plan`."""
    try:
        calls = next(plan)
        while True:
            calls = plan.send(await executor.run_many(calls))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
