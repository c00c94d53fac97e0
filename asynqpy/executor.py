"""Runs broker :class:`~asynqpy.broker.Call` objects on a Redis client, sync or async.

Scripts run with EVALSHA; a NOSCRIPT reply (a fresh or restarted server, a new cluster node) falls
back to EVAL of the same source, which also caches it on that node. Pipelines do not ask
SCRIPT EXISTS first (redis-py's Script objects would, costing a round trip per pipeline).
The two executors share everything but the ``await``s.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any, TypeVar

from hiredis import pack_command
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .broker import Call
from .scripts import load_scripts

T = TypeVar("T")


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
    # execute_command, not pipe.evalsha(): redis-py's cluster pipelines block the evalsha() method
    # but route a raw EVALSHA by its keys like any other command.
    pipe = redis.pipeline(transaction=False)
    for call in calls:
        pipe.execute_command(*evalsha_args(call))
    return pipe


def _parse(call: Call[Any], reply: Any) -> Any:
    if isinstance(reply, Exception):
        return reply
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
    client, which reconnects as usual."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self._fast = type(redis).__name__ == "Redis" and hasattr(redis, "connection_pool")
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
        """Run one call; its parser's typed error (or the Redis error) is raised."""
        return call.parse(self._send(call))

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Run calls in one pipeline (no MULTI). Each result is the parsed reply or the exception
        that call raised; one call failing does not stop the others."""
        if not calls:
            return []
        if len(calls) == 1 and self._fast and calls[0].script:  # the direct path, no pipeline
            try:
                return [_parse(calls[0], self._send(calls[0]))]
            except Exception as exc:  # noqa: BLE001 - reported per call
                return [exc]
        replies = _pipeline(self.redis, calls).execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                try:
                    replies[i] = self._send(calls[i])
                except Exception as exc:  # noqa: BLE001 - reported per call
                    replies[i] = exc
        return [_parse(c, r) for c, r in zip(calls, replies)]


class AsyncExecutor:
    """Runs calls on an asyncio redis-py client (``redis.asyncio.Redis`` or ``RedisCluster``)."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    async def _send(self, call: Call[Any]) -> Any:
        try:
            return await self.redis.execute_command(*evalsha_args(call))
        except NoScriptError:
            return await self.redis.execute_command(*_eval(call))

    async def run(self, call: Call[T]) -> T:
        """Async twin of :meth:`SyncExecutor.run`."""
        return call.parse(await self._send(call))

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Async twin of :meth:`SyncExecutor.run_many`."""
        if not calls:
            return []
        replies = await _pipeline(self.redis, calls).execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                try:
                    replies[i] = await self._send(calls[i])
                except Exception as exc:  # noqa: BLE001 - reported per call
                    replies[i] = exc
        return [_parse(c, r) for c, r in zip(calls, replies)]
