"""Runs broker :class:`~asynqpy.broker.Call` objects on a Redis client, sync or async.

Scripts run as Redis Functions (FCALL of the script's library, :mod:`asynqpy.core.spine.library`:
its helpers made once per server, not at every call): a "function not found" reply (a fresh or
restarted server, a new cluster node, a new version of asynqpy) loads the library (FUNCTION LOAD
REPLACE) and the call goes again. A server without functions (Redis < 7.0) or an ACL role without
``+fcall`` / ``+function|load`` turns the executor to EVALSHA for good (:func:`.replies.functions_refused`),
as does ``ASYNQPY_SCRIPT_CALLS=evalsha``; there a NOSCRIPT reply falls back to EVAL of the same source,
which also caches it on that node. Pipelines do not ask SCRIPT EXISTS first (redis-py's Script
objects would, costing a round trip per pipeline).
The two executors are written once (:mod:`asynqpy.core.spine.twin`, as the facades are): every public
method is a plan of :class:`_ExecutorPlans` that yields its I/O as a few steps (one command, the
direct path, one node's pipeline, the nodes' pipelines, the cluster's slot map);
:class:`SyncExecutor` performs each step in the calling thread, :class:`AsyncExecutor` awaits it.

On a Redis Cluster, a batch of calls goes out as one pipeline per master (each call to the master
serving its keys' slot), not through redis-py's cluster pipeline, which on one node's failure
closes every connection of the client and loses the replies of the nodes that did answer. A call
refused unrun (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) is sent again after the slot map is reloaded;
an unreachable node also reloads it, so calls follow a replica promoted in a failover.

``run_many_replicated`` is the write path of a client with ``wait_replicas``: each node's calls
are pipelined on one connection of that node, followed by ``WAIT n timeout`` on that same
connection (WAIT counts the replicas that have every write *of its connection* so far).

The steps, the direct path's helpers and the guard against a lost cancellation are in
:mod:`.steps`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from hiredis import pack_command
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.spine.broker import Call
from ..core.spine.twin import Async, Steps, Sync, planned
from .connection import REDIS_ERRORS, is_cluster
from .replies import (
    FUNCTIONS,
    REDIRECTS,
    Wait,
    bare,
    by_node,
    commands_of,
    eval_args,
    evalsha_args,
    full_error,
    function_missing,
    functions_refused,
    load_args,
    merge,
    missed,
    no_script,
    parse_reply,
    refused_whole,
    script_args,
    settle,
    stale,
    typed_error,
    unavailable,
)
from .steps import (
    _READY,
    _REFRESH,
    _SCRIPTS,
    _TOPOLOGY,
    DIRECT_MAX,
    _Direct,
    _Each,
    _give_back,
    _kept,
    _Many,
    _packed,
    _Pipe,
    _pipeline,
    _read,
)

__all__ = ["DIRECT_MAX", "AsyncExecutor", "SyncExecutor", "arun_plan", "evalsha_args", "run_plan", "unavailable"]

T = TypeVar("T")
log = logging.getLogger("asynqpy.executor")


class _ExecutorPlans:
    """What :class:`SyncExecutor` and :class:`AsyncExecutor` do, written once as plans
    (:mod:`asynqpy.core.spine.twin`): each public method yields its I/O as steps (a command's tuple,
    :class:`_Direct`, :class:`_Pipe`, :class:`_Each`, :class:`_Many` and the cluster's
    ``_READY``, ``_TOPOLOGY``, ``_REFRESH``); the two classes only perform them."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self._cluster = is_cluster(redis)
        self._ready = not self._cluster or not self._lazy  # a cluster client initialized (its slot map loaded)
        self.functions = FUNCTIONS
        """Whether scripts go as FCALL (else EVALSHA): until the server or the ACL refuses functions."""
        # a redis-py client of one server (not a cluster, not fakeredis): the direct paths talk to its connections
        kind = type(redis)
        self._fast = (kind.__name__ == "Redis" and kind.__module__.startswith("redis.")
                      and hasattr(redis, "connection_pool"))

    _lazy = False
    """Whether a cluster client of this kind loads its slot map at its first command (asyncio's)."""

    @planned
    def run(self, call: Call[T]) -> Steps[T]:
        """Run one call; its parser's typed error (or the Redis error) is raised; a Redis at
        maxmemory refusing the call raises :class:`RedisFullError`; Redis unreachable (or the
        connection broken), :class:`RedisUnavailableError`. (Async: a call during which its task
        was asked to cancel raises CancelledError, even where redis-py lost the cancellation.)"""
        if not self._ready:
            yield _READY
        try:
            reply = yield from self._one(call, self.functions)
        except OutOfMemoryError as exc:
            raise full_error(exc) from exc
        except Exception as exc:
            err = typed_error(exc)
            if err is None:
                raise
            raise err from exc
        return call.parse(reply)

    def _one(self, call: Call[Any], functions: bool) -> Steps[Any]:
        """The reply of one call, sent on its own (FCALL if ``functions``, loading its library when
        the server lacks it; else, or if that fails, EVALSHA, then EVAL after a NOSCRIPT); raises what
        Redis raised."""
        if call.script and functions:
            try:
                return (yield script_args(call, True))
            except ResponseError as exc:
                error = exc
            again = yield from self._functions_after(error, [call.script])
            if again is None:
                raise error
            if again:
                return (yield script_args(call, True))
        try:
            return (yield evalsha_args(call))
        except NoScriptError:  # a fresh or restarted server: EVAL, which also caches the script
            return (yield eval_args(call))

    def _functions_after(self, reply: Any, names: Sequence[str]) -> Steps[bool | None]:
        """After an FCALL's error ``reply``, how the calls of the scripts ``names`` go again: None =
        they ran (``reply`` is theirs: the caller raises it), True = by FCALL (the missing libraries
        loaded), False = by EVALSHA. A refusal of functions, or of their load, turns them off for
        good; a load Redis refuses otherwise (full: FUNCTION LOAD may grow memory) leaves them on,
        and these calls go by EVALSHA (EVAL runs where Redis is full as before)."""
        if function_missing(reply):
            commands = load_args(names)  # (on a cluster: on every master, one pipeline each)
            nodes = self.redis.get_primaries() if self._cluster else [None]
            outs = yield _Each([self._node_pipe(node, commands) for node in nodes])
            failed = next((r for out in outs for r in out if isinstance(r, Exception)), None)
            if failed is not None:
                if functions_refused(failed):
                    self._functions_off(failed)
                return False
            return True
        if functions_refused(reply):
            self._functions_off(reply)
            return False
        if refused_whole(reply):
            return False  # (this call only: by EVALSHA, refused at its first write that may grow memory)
        return None

    def _functions_off(self, reply: Any) -> None:
        if self.functions:
            log.info("scripts go by EVALSHA: the server or this user's ACL refused Redis Functions (%s)", reply)
        self.functions = False

    @planned
    def run_many(self, calls: Sequence[Call[Any]]) -> Steps[list[Any]]:
        """Run calls in one pipeline (no MULTI); on a cluster, one pipeline per master. Each result
        is the parsed reply or the exception that call raised; one call failing does not stop the
        others."""
        if not calls:
            return []
        try:
            if self._cluster:
                if not self._ready:
                    yield _READY
                return (yield from self._per_node(calls, None))
            replies, functions = None, self.functions
            if self._fast and len(calls) <= DIRECT_MAX and all(bare(c) for c in calls):  # no pipeline
                replies = yield _Direct(calls)
            if replies is None:
                replies = list((yield _Pipe(None, [script_args(c, functions) for c in calls])))
        except Exception as exc:
            err = typed_error(exc)
            if err is None:
                raise
            raise err from exc
        for r in replies:
            if missed(r, functions):
                yield from self._resend(calls, replies, functions)
                break
        return [parse_reply(c, r) for c, r in zip(calls, replies)]

    @planned
    def run_many_replicated(self, calls: Sequence[Call[Any]], replicas: int, timeout_ms: int) -> Steps[list[Any]]:
        """Like :meth:`run_many`, and each successful call is confirmed by ``WAIT replicas
        timeout_ms`` on the connection that ran it, else its result is a NotReplicatedError."""
        if not calls:
            return []
        if not self._ready:
            yield _READY
        return (yield from self._per_node(calls, (replicas, timeout_ms)))

    @planned
    def rounds(self, plan: Generator[list[Call[Any]], list[Any], T]) -> Steps[T]:
        """Drive a plan (:mod:`asynqpy.core.inspector.inspection`): each round trip it yields, run by
        :meth:`run_many`; returns its answer."""
        try:
            calls = next(plan)
            while True:
                calls = plan.send((yield _Many(calls)))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _resend(self, calls: Sequence[Call[Any]], replies: list[Any], functions: bool) -> Steps[None]:
        """The calls whose script did not run (NOSCRIPT, a function not found or refused, a
        function refused whole by a full Redis: :func:`.replies.missed`) sent again on their own
        (:meth:`_one`, the missing libraries loaded first); each reply (or error) in place in ``replies``."""
        todo = [i for i, reply in enumerate(replies) if missed(reply, functions)]
        try:
            again = yield from self._functions_after(next((replies[i] for i in todo if function_missing(replies[i])),
                                                          replies[todo[0]]), [calls[i].script for i in todo])
        except Exception as exc:  # noqa: BLE001 - the calls go again all the same (EVALSHA, then EVAL)
            log.warning("could not load the scripts' libraries: %s", exc)
            again = False
        for i in todo:
            try:
                replies[i] = yield from self._one(calls[i], bool(again))
            except Exception as exc:  # noqa: BLE001 - reported per call
                replies[i] = exc

    def _per_node(self, calls: Sequence[Call[Any]], wait: Wait) -> Steps[list[Any]]:
        """Run ``calls`` as one pipeline per node (the nodes at once in the async executor); see
        :func:`settle` for what each result is."""
        if self._cluster:
            try:
                yield _TOPOLOGY
            except REDIS_ERRORS as exc:
                return [exc] * len(calls)
        results: list[Any] = [None] * len(calls)
        todo: list[int] = list(range(len(calls)))
        for _ in range(REDIRECTS):
            groups, refused = by_node(self.redis, calls, todo, results)
            outs = yield _Each([self._node_send(node, [calls[i] for i in idx], wait) for node, idx in groups])
            for (_, idx), out in zip(groups, outs):
                refused += settle(calls, idx, out, wait, results)
            if stale(self.redis, refused, results):
                try:
                    yield _REFRESH
                except REDIS_ERRORS as exc:  # the next call retries
                    log.warning("could not reload the cluster's slot map: %s", exc)
            if not refused:
                break
            todo = refused
        return results

    def _node_send(self, node: Any, calls: list[Call[Any]], wait: Wait) -> Steps[list[Any]]:
        """One pipeline (one connection) on ``node`` (None: the single-node client) for ``calls``
        and the WAIT; NOSCRIPT replies are sent again with EVAL. Never raises: a failure is
        every reply."""
        functions = self.functions
        out = yield from self._node_pipe(node, commands_of(calls, False, wait, functions))
        missing = no_script(out, len(calls), functions)
        if not missing:
            return out
        # the libraries of the missing functions loaded on this node, then those calls sent with EVAL
        loads = load_args([calls[i].script for i in missing]) if any(function_missing(out[i]) for i in missing) else []
        if any(functions_refused(out[i]) for i in missing):
            self._functions_off(next(out[i] for i in missing if functions_refused(out[i])))
        again = yield from self._node_pipe(node, loads + commands_of([calls[i] for i in missing], True, wait))
        for r in again[:len(loads)]:
            if functions_refused(r):
                self._functions_off(r)
        return merge(out, missing, again[len(loads):], wait)

    def _node_pipe(self, node: Any, commands: list[tuple[Any, ...]]) -> Steps[list[Any]]:
        try:
            return list((yield _Pipe(node, commands)))
        except Exception as exc:  # noqa: BLE001 - the outcome of these calls is unknown
            return [exc] * len(commands)


class SyncExecutor(_ExecutorPlans, Sync):
    """Runs calls on a synchronous redis-py client (``redis.Redis`` or ``redis.RedisCluster``).

    Script calls on a plain ``redis.Redis`` take a fast path: each thread keeps one connection of
    the client's pool and talks to it directly, skipping redis-py's per-command machinery (about
    40 µs a call). Any connection error drops that connection and retries once through the
    client, which reconnects as usual (through a Sentinel-managed pool: to the current master; a
    demoted master's READONLY reply counts as a connection error).

    On a cluster, :meth:`run_many` sends one pipeline per master, concurrently in the async twin,
    rather than redis-py's cluster pipeline: a master that is down (or failing over) fails only the
    calls of its slots, and the slot map is reloaded, not every connection of the client closed."""

    def __init__(self, redis: Any) -> None:
        super().__init__(redis)
        self._local = threading.local()
        self._taken: list[Any] = []  # the connections threads hold: back to the pool when this is dropped
        if self._fast:
            weakref.finalize(self, _give_back, redis.connection_pool, self._taken, os.getpid())

    def _step(self, step: Any) -> Any:
        kind = type(step)
        if kind is tuple:
            if self._fast and step[0] in _SCRIPTS:
                return self._direct(step)
            return self.redis.execute_command(*step)
        if kind is _Direct:
            return self._direct_many(step.calls)
        if kind is _Pipe:
            client = self.redis if step.node is None else self.redis.get_redis_connection(step.node)
            return _pipeline(client, step.commands).execute(raise_on_error=False)
        if kind is _Each:
            return [self._drive(plan) for plan in step.plans]  # one node after the other
        if kind is _Many:
            return self.run_many(step.calls)
        if step is _REFRESH:
            return self.redis.nodes_manager.initialize()
        return None  # _READY, _TOPOLOGY: the sync cluster client was initialized when made

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
        """:class:`_Direct` on this thread's connection: what a redis-py pipeline does, without its
        bookkeeping (about 100 µs of CPU for two commands, as much as the rest of an enqueue)."""
        conn = self._conn()
        try:
            conn.send_packed_command([_packed(calls, self.functions)])  # (one write: a list is sent an item at a time)
            return [_read(conn.read_response) for _ in calls]
        except (RedisConnectionError, RedisTimeoutError, OSError):
            conn.disconnect()
            self._release(conn)
            return None

    def run_many_now(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """:meth:`run_many`, its common case without driving its plan (the twin's and the guard's
        generators: ~10 µs of CPU a call, an eighth of a lone enqueue's): when the direct path
        takes the calls (:class:`_Direct`) and every script ran, their replies parsed as the plan
        parses them; anything else (not checked yet, a pipeline, a connection error, a script to
        load and send again) goes as the plan does it."""
        if not (self._fast and self._checked() and len(calls) <= DIRECT_MAX and all(bare(c) for c in calls)):
            return self.run_many(calls)
        functions = self.functions
        try:
            replies = self._direct_many(calls)
            if replies is None:  # (a connection error: sent again in a redis-py pipeline, as the plan does)
                replies = list(self._step(_Pipe(None, [script_args(c, functions) for c in calls])))
        except Exception as exc:
            err = typed_error(exc)
            if err is None:
                raise exc
            raise err from exc
        for r in replies:
            if missed(r, functions):
                self._drive(self._resend(calls, replies, functions))
                break
        return [parse_reply(c, r) for c, r in zip(calls, replies)]

    def _checked(self) -> bool:
        """Whether calls may skip the plan's first step (a guarded executor's: until its check passed)."""
        return True

    def close(self) -> None:
        """Give this thread's connection back to the pool (those of other threads go back when the
        executor is dropped)."""
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == os.getpid():
            self._release(held[1])
        self._local.held = None


class AsyncExecutor(_ExecutorPlans, Async):
    """Runs calls on an asyncio redis-py client (``redis.asyncio.Redis`` or ``RedisCluster``).
    A call during which its task was asked to cancel raises CancelledError, even where redis-py
    lost the cancellation (:func:`_kept`)."""

    _lazy = True
    _init_lock: asyncio.Lock | None = None

    async def _drive(self, plan: Steps[T]) -> T:
        return await _kept(super()._drive(plan))

    async def _step(self, step: Any) -> Any:
        kind = type(step)
        if kind is tuple:
            return await self.redis.execute_command(*step)
        if kind is _Direct:
            return await self._direct_many(step.calls)
        if kind is _Pipe:
            return await self._pipe(step.node, step.commands)
        if kind is _Each:  # the nodes at once
            return await asyncio.gather(*[Async._drive(self, plan) for plan in step.plans])
        if kind is _Many:
            return await self.run_many(step.calls)
        if step is _READY:
            return await self._initialized()
        if step is _TOPOLOGY:
            return await self.redis.initialize()  # a no-op once the slot map is loaded
        return await self.redis.nodes_manager.initialize()  # _REFRESH

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

    async def _pipe(self, node: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
        if node is None:
            return list(await _pipeline(self.redis, commands).execute(raise_on_error=False))
        from redis.asyncio.cluster import PipelineCommand

        cmds = [PipelineCommand(i, *args) for i, args in enumerate(commands)]
        await node.execute_pipeline(cmds)  # one connection of that node
        return [c.result for c in cmds]

    keep_direct = False
    """Whether the direct path keeps its connection between calls (set by a client that made its
    Redis client, whose ``close`` closes the pool: ``AsyncClient``)."""
    _direct_conn: tuple[asyncio.AbstractEventLoop, Any] | None = None  # (its loop, the connection kept)

    async def _direct_many(self, calls: Sequence[Call[Any]]) -> list[Any] | None:
        """:class:`_Direct` on a pooled connection; one that a failure or a cancellation leaves
        with replies unread is disconnected, never reused. With :attr:`keep_direct`, the
        connection of a call that went well is kept for the next (one at a time: a call that finds
        it taken uses the pool), as the sync executor keeps one per thread: no checkout, release
        and shielded release task a call (~30 % of an ``AsyncClient.enqueue``'s CPU)."""
        pool, loop = self.redis.connection_pool, asyncio.get_running_loop()
        kept, self._direct_conn = self._direct_conn, None
        if kept is not None and kept[0] is not loop:  # (made on another loop: back to the pool)
            await asyncio.shield(pool.release(kept[1]))
            kept = None
        conn = kept[1] if kept is not None else await pool.get_connection()
        replies: list[Any] = []
        try:
            await conn.send_packed_command(_packed(calls, self.functions))
            for _ in calls:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:  # (this call's error; the next reply is read all the same)
                    replies.append(exc)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await conn.disconnect()
            await asyncio.shield(pool.release(conn))
            return None
        except BaseException:
            await asyncio.shield(conn.disconnect())
            await asyncio.shield(pool.release(conn))
            raise
        if self.keep_direct and self._direct_conn is None:
            self._direct_conn = (loop, conn)
        else:
            await asyncio.shield(pool.release(conn))
        return replies

    async def release_direct(self) -> None:
        """Give the direct path's kept connection back to the pool (a client's close)."""
        kept, self._direct_conn = self._direct_conn, None
        if kept is not None:
            await asyncio.shield(self.redis.connection_pool.release(kept[1]))


def run_plan(executor: SyncExecutor, plan: Generator[list[Call[Any]], list[Any], T]) -> T:
    """Drive a plan (:mod:`asynqpy.core.inspector.inspection`): :meth:`SyncExecutor.rounds`."""
    return executor.rounds(plan)


async def arun_plan(executor: AsyncExecutor, plan: Generator[list[Call[Any]], list[Any], T]) -> T:
    """Drive a plan with the async executor: :meth:`AsyncExecutor.rounds`."""
    return await executor.rounds(plan)
