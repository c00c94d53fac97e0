"""Runs broker :class:`~asynqpy.broker.Call` objects on a Redis client, sync or async.

Scripts run with EVALSHA; a NOSCRIPT reply (a fresh or restarted server, a new cluster node) falls
back to EVAL of the same source, which also caches it on that node. Pipelines do not ask
SCRIPT EXISTS first (redis-py's Script objects would, costing a round trip per pipeline).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from redis.exceptions import NoScriptError

from .broker import Call
from .scripts import load_scripts

T = TypeVar("T")


def _evalsha_args(call: Call[Any]) -> tuple[Any, ...]:
    script = load_scripts()[call.script]
    return (script.sha, len(call.keys), *call.keys, *call.args)


def _eval_args(call: Call[Any]) -> tuple[Any, ...]:
    script = load_scripts()[call.script]
    return (script.source, len(call.keys), *call.keys, *call.args)


class SyncExecutor:
    """Runs calls on a synchronous redis-py client (``redis.Redis`` or ``redis.RedisCluster``)."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    def run(self, call: Call[T]) -> T:
        if not call.script:
            return call.parse(self.redis.execute_command(*call.command))
        try:
            reply = self.redis.evalsha(*_evalsha_args(call))
        except NoScriptError:
            reply = self.redis.eval(*_eval_args(call))
        return call.parse(reply)

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Run calls in one pipeline (no MULTI). Each result is the parsed reply or the exception
        that call raised; one call failing does not stop the others."""
        if not calls:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for call in calls:
            if call.script:
                # execute_command, not pipe.evalsha(): redis-py's cluster pipelines block the
                # evalsha() method but route a raw EVALSHA by its keys like any other command.
                pipe.execute_command("EVALSHA", *_evalsha_args(call))
            else:
                pipe.execute_command(*call.command)
        replies = pipe.execute(raise_on_error=False)
        out: list[Any] = []
        for call, reply in zip(calls, replies):
            if isinstance(reply, NoScriptError):
                try:
                    reply = self.redis.eval(*_eval_args(call))
                except Exception as exc:  # noqa: BLE001 - reported per call
                    reply = exc
            out.append(_parse(call, reply))
        return out


class AsyncExecutor:
    """Runs calls on an asyncio redis-py client (``redis.asyncio.Redis`` or ``RedisCluster``)."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    async def run(self, call: Call[T]) -> T:
        if not call.script:
            return call.parse(await self.redis.execute_command(*call.command))
        try:
            reply = await self.redis.evalsha(*_evalsha_args(call))
        except NoScriptError:
            reply = await self.redis.eval(*_eval_args(call))
        return call.parse(reply)

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Async twin of :meth:`SyncExecutor.run_many`."""
        if not calls:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for call in calls:
            if call.script:
                # execute_command, not pipe.evalsha(): redis-py's cluster pipelines block the
                # evalsha() method but route a raw EVALSHA by its keys like any other command.
                pipe.execute_command("EVALSHA", *_evalsha_args(call))
            else:
                pipe.execute_command(*call.command)
        replies = await pipe.execute(raise_on_error=False)
        out: list[Any] = []
        for call, reply in zip(calls, replies):
            if isinstance(reply, NoScriptError):
                try:
                    reply = await self.redis.eval(*_eval_args(call))
                except Exception as exc:  # noqa: BLE001 - reported per call
                    reply = exc
            out.append(_parse(call, reply))
        return out


def _parse(call: Call[Any], reply: Any) -> Any:
    if isinstance(reply, Exception):
        return reply
    try:
        return call.parse(reply)
    except Exception as exc:  # noqa: BLE001 - a typed error for this call alone
        return exc
