"""The aggregator loop: turns each due aggregation group's tasks into one task.

A group (tasks enqueued with ``group=...``) is due when its newest task has waited the grace
period (no task joined for that long), when its oldest has waited the max delay, or when it holds
max size tasks. Each tick (every ``min(1 s, grace / 4)``) the loop asks each queue for its due
groups (three ZRANGEBYSCORE on the groups' zsets: newest join times, oldest join times, sizes),
reads each due group's oldest tasks (up to max size), calls the user's aggregator function
``(group, tasks) -> (type, payload[, options])`` and hands the result to the aggregate script,
which deletes those tasks and enqueues the new one in one step, but only if every one of them is
still in the group unchanged: so any number of servers may aggregate the same group, and exactly
one of them succeeds; a server killed at any point leaves the group whole or aggregated.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from ..core.model import options as opts
from ..core.model.errors import AsynqpyError, EncryptionError, InvalidArgumentError
from ..core.model.task import Task
from ..core.security import encryption as enc
from ..core.security.keyplans import load_plan
from ..core.security.signing import open_message
from ..core.spine.broker import Acted, Call
from ..core.spine.keys import queue_keys
from ..redisio.connection import REDIS_ERRORS
from ..redisio.executor import arun_plan
from .context import Context

log = logging.getLogger("asynqpy.aggregator")

Aggregator = Callable[[str, list[Task]], Any]
"""``aggregator(group, tasks)`` -> ``(task_type, payload)`` or ``(task_type, payload, options)``:
the one task a due group's tasks become (in the same queue; options: max_retry, timeout, deadline,
retention, retry_delay, headers). Plain or ``async def``."""
MAX_GROUP_SIZE = 1000
"""Most tasks one aggregation takes (one script call)."""
AGGREGATE_OPTIONS = frozenset({"max_retry", "timeout", "deadline", "retention", "retry_delay", "headers"})
FAILED_BACKOFF = 30.0
"""Seconds a group whose aggregator call failed is left alone before the next try."""


@dataclass(frozen=True)
class AggregatorParams:
    """The aggregator function and when a group is due: ``grace`` seconds without a new task,
    ``max_delay`` seconds since its oldest task joined (None = no limit), ``max_size`` tasks."""

    queues: tuple[str, ...]
    aggregator: Aggregator
    grace: float
    max_delay: float | None
    max_size: int
    max_payload_bytes: int = 1 << 20


class Aggregation:
    """One aggregator loop (see the module docstring)."""

    def __init__(self, ctx: Context, params: AggregatorParams, pool: Executor) -> None:
        self.ctx, self.p, self.pool = ctx, params, pool
        self._failed: dict[tuple[str, str], float] = {}  # (queue, group) -> monotonic time to try again
        self.aggregated = 0  # groups this loop aggregated (tests, logs)

    def tick(self) -> float:
        return min(1.0, max(0.05, self.p.grace / 4))

    async def run(self) -> None:
        backoff = 0.1
        while not self.ctx.stopping.is_set():
            try:
                await self.once()
                delay, backoff = self.tick(), 0.1
            except REDIS_ERRORS as exc:
                self.ctx.health.failed("aggregating groups", exc)
                delay, backoff = backoff, min(backoff * 2, 5.0)
            await self.ctx.sleep(delay)

    async def once(self) -> int:
        """One pass over every queue; returns how many groups were aggregated."""
        now = self.ctx.clock.now_ms()
        calls: list[Call[Any]] = []
        served = self.ctx.served
        queues = tuple(served.current) if served is not None else self.p.queues  # (patterns: worker/queues.py)
        if not queues:
            return 0
        for q in queues:
            k = queue_keys(q)
            calls.append(_names(("ZRANGEBYSCORE", k.groups, "-inf", now - int(self.p.grace * 1000), "LIMIT", 0, 100)))
            if self.p.max_delay is not None:
                calls.append(_names(("ZRANGEBYSCORE", k.groups_first, "-inf", now - int(self.p.max_delay * 1000),
                                     "LIMIT", 0, 100)))
            calls.append(_names(("ZRANGEBYSCORE", k.groups_size, self.p.max_size, "+inf", "LIMIT", 0, 100)))
        replies = await self.ctx.exec.run_many(calls)
        per_queue = len(calls) // len(queues)
        done = 0
        for i, q in enumerate(queues):
            due: set[str] = set()
            for r in replies[i * per_queue:(i + 1) * per_queue]:
                if isinstance(r, BaseException):
                    raise r
                due.update(r)
            for group in sorted(due):
                if self._failed.get((q, group), 0.0) > time.monotonic():
                    continue
                done += await self._aggregate(q, group)
        return done

    async def _aggregate(self, queue: str, group: str) -> int:
        k = queue_keys(queue)
        for _ in range(3):  # a member changed meanwhile: read the group again
            (ids,) = await self.ctx.exec.run_many([_names(("ZRANGE", k.group(group), 0, self.p.max_size - 1))])
            if isinstance(ids, BaseException):
                raise ids
            if not ids:
                return 0
            (values,) = await self.ctx.exec.run_many([Call(lambda r: r, command=("HMGET", k.tasks, *ids))])
            if isinstance(values, BaseException):
                raise values
            members: list[tuple[str, bytes]] = []
            tasks: list[Task] = []
            for id, stored in zip(ids, values):
                if stored is None or stored[:1] != b"g":
                    continue  # left the group meanwhile: the script checks the rest
                try:
                    msg = await self._member(queue, id, stored)
                except AsynqpyError as exc:  # unsigned, forged or malformed: archived as it is, never signed
                    log.error("group %s of queue %s: task %s refused (%s); archiving it unrun", group, queue, id,
                              exc)
                    await self.ctx.exec.run_many([self.ctx.broker.ungroup(queue, id, stored, "archive", group)])
                    continue
                members.append((id, stored))
                tasks.append(Task(msg.type, id=id, queue=queue, _msg=msg))
            if not tasks:
                return 0
            try:
                made = self._sealed(queue, await self._call(group, tasks))
                p = _prepare(queue, made, self.p.max_payload_bytes, self.ctx.clock.local_ms())
            except Exception as exc:
                log.error("the aggregator failed for group %s of queue %s (%d task(s)): %s; trying again in %gs",
                          group, queue, len(tasks), exc, FAILED_BACKOFF, exc_info=exc)
                self._failed[(queue, group)] = time.monotonic() + FAILED_BACKOFF
                return 0
            (code,) = await self.ctx.exec.run_many([self.ctx.broker.aggregate(queue, group, members, p.id, p.msg)])
            if isinstance(code, BaseException):
                raise code
            if code == Acted.OK:
                self.aggregated += 1
                log.info("aggregated %d task(s) of group %s (queue %s) into task %s", len(members), group, queue, p.id)
                return 1
            if code != Acted.CHANGED:
                log.error("group %s of queue %s: aggregate refused (%s)", group, queue, code)
                return 0
        return 0

    async def _member(self, queue: str, id: str, stored: bytes) -> Any:
        """A member's message, verified, and decrypted when it is encrypted (the aggregator sees
        it plain). Raises what makes it archived unrun: a bad signature, a key it cannot open."""
        msg = open_message(self.ctx.broker.signer, queue, id, stored[1:])
        if self.ctx.broker.ring is not None or enc.sealed_message(msg):
            msg = await self._opened(queue, msg)
        return msg

    async def _opened(self, queue: str, msg: Any) -> Any:
        """A member's message with its encrypted values decrypted (EncryptionError: archived)."""
        ring = self.ctx.broker.ring
        if ring is None:
            raise EncryptionError("the task is encrypted and this worker has no key ring")
        tenants = {(queue, t) for t in enc.message_tenants(msg)}
        if tenants:
            await arun_plan(self.ctx.exec, load_plan(ring, tenants))
        return enc.open_message(ring, queue, msg)

    def _sealed(self, queue: str, made: Any) -> Any:
        """What the aggregator returned, its payload encrypted when this worker has a key ring."""
        ring = self.ctx.broker.ring
        if ring is None or not isinstance(made, (tuple, list)) or len(made) < 2:
            return made
        options = made[2] if len(made) == 3 and isinstance(made[2], Mapping) else {}
        tenant = options.get("tenant") or ""
        return (made[0], ring.seal(made[1], enc.PAYLOAD, options.get("queue", queue),
                                   tenant if isinstance(tenant, str) else ""), *made[2:])

    async def _call(self, group: str, tasks: list[Task]) -> Any:
        fn = self.p.aggregator
        if inspect.iscoroutinefunction(fn):
            return await fn(group, tasks)
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, group, tasks)


def _names(command: tuple[Any, ...]) -> Call[list[str]]:
    return Call(lambda r: [x.decode(errors="surrogateescape") for x in r], command=command)


def _prepare(queue: str, made: Any, max_payload_bytes: int, now_ms: int) -> opts.Prepared:
    """The aggregate task from what the aggregator returned."""
    if not isinstance(made, (tuple, list)) or not 2 <= len(made) <= 3 or (
            len(made) == 3 and not isinstance(made[2], Mapping)):
        raise InvalidArgumentError(f"an aggregator returns (task_type, payload) or (task_type, payload, options), "
                                   f"got {made!r}")
    options = dict(made[2]) if len(made) == 3 else {}
    bad = set(options) - AGGREGATE_OPTIONS
    if bad:
        raise InvalidArgumentError(opts.unknown_options("aggregate task option", bad, sorted(AGGREGATE_OPTIONS)))
    return opts.prepare(made[0], made[1], queue=queue, max_payload_bytes=max_payload_bytes, now=now_ms / 1000,
                        **options)


def check_params(aggregator: Any, grace: Any, max_delay: Any, max_size: Any) -> None:
    """Raise InvalidArgumentError for bad aggregation settings."""
    if aggregator is not None and not callable(aggregator):
        raise InvalidArgumentError("group_aggregator must be a function (group, tasks) -> (type, payload)")
    for name, value in (("group_grace_period", grace), ("group_max_delay", max_delay)):
        if value is None and name == "group_max_delay":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise InvalidArgumentError(f"{name} must be a number of seconds > 0, got {value!r}")
    if isinstance(max_size, bool) or not isinstance(max_size, int) or not 1 <= max_size <= MAX_GROUP_SIZE:
        raise InvalidArgumentError(f"group_max_size must be an int from 1 to {MAX_GROUP_SIZE}, got {max_size!r}")

