"""Runs broker :class:`~asynqpy.broker.Call` objects on a Redis client, sync or async.

Scripts run with EVALSHA; a NOSCRIPT reply (a fresh or restarted server, a new cluster node) falls
back to EVAL of the same source, which also caches it on that node. Pipelines do not ask
SCRIPT EXISTS first (redis-py's Script objects would, costing a round trip per pipeline).
The two executors share everything but the ``await``s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from redis.exceptions import NoScriptError

from .broker import Call
from .scripts import load_scripts

T = TypeVar("T")


def _evalsha(call: Call[Any]) -> tuple[Any, ...]:
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
        pipe.execute_command(*_evalsha(call))
    return pipe


def _parse(call: Call[Any], reply: Any) -> Any:
    if isinstance(reply, Exception):
        return reply
    try:
        return call.parse(reply)
    except Exception as exc:  # noqa: BLE001 - a typed error for this call alone
        return exc


class SyncExecutor:
    """Runs calls on a synchronous redis-py client (``redis.Redis`` or ``redis.RedisCluster``)."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    def _send(self, call: Call[Any]) -> Any:
        try:
            return self.redis.execute_command(*_evalsha(call))
        except NoScriptError:
            return self.redis.execute_command(*_eval(call))

    def run(self, call: Call[T]) -> T:
        """Run one call; its parser's typed error (or the Redis error) is raised."""
        return call.parse(self._send(call))

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Run calls in one pipeline (no MULTI). Each result is the parsed reply or the exception
        that call raised; one call failing does not stop the others."""
        if not calls:
            return []
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
            return await self.redis.execute_command(*_evalsha(call))
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
