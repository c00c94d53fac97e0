"""Heartbeat: every ``heartbeat_interval`` renews the leases of the tasks this server holds and
marks the server alive. A lease the server can no longer renew (another worker took the task after
an expiry, or Redis has been unreachable for longer than the lease) cancels its handler."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.server import record as server_record
from ..core.spine.broker import Call
from ..core.spine.keys import SERVERS, server_info
from ..redisio.connection import REDIS_ERRORS
from .context import Context, Holder, Running
from .settings import ServerOptions

log = logging.getLogger("asynqpy.heartbeat")

INFO_EVERY = 6
"""The server description is rewritten every INFO_EVERY beats (its TTL covers a little more), and
at any beat where the set of tasks the server runs changed (an idle server adds no command)."""


def info_ttl_ms(interval: float) -> int:
    """The description's TTL: INFO_EVERY beats and three more, the margin of the server's liveness
    (3 beats), in milliseconds. It was in whole seconds, rounded down: a 0.2 s beat gave a TTL of
    1 s for a description rewritten every 1.2 s, so an idle server was listed with no description
    (``server ls``: "no live servers", the console: "no live server") for a fifth of the time."""
    return max(1, round(interval * (INFO_EVERY + 3) * 1000))


@dataclass(frozen=True)
class HeartbeatParams:
    """What the heartbeat reads: who the server is (for the live-server registry and its record),
    how often it beats, how long a renewed lease lasts."""

    server_id: str
    started_at: float
    interval: float
    lease: float  # seconds
    queues: Mapping[str, int]  # the rest is only written to the server record
    concurrency: int
    strict_priority: bool
    name: str = ""
    version: str = ""

    @property
    def lease_ms(self) -> int:
        return int(self.lease * 1000)

    @classmethod
    def of(cls, o: ServerOptions, server_id: str, started_at: float) -> HeartbeatParams:
        return cls(server_id, started_at, o.heartbeat_interval, o.lease, dict(o.queues), o.concurrency,
                   o.strict_priority, o.worker_name, o.version or "")


class Heartbeat:
    def __init__(self, ctx: Context, processor: Holder, params: HeartbeatParams) -> None:
        self.ctx = ctx
        self.processor = processor
        self.p = params
        self._beats = 0
        self.registered = False  # a heartbeat was written: the server is listed (the health probes)
        self._described: frozenset[tuple[str, str]] | None = None
        self._stopped = False

    def _info(self, running: list[Running]) -> bytes:
        """The server's description (msgpack): identity, settings, and each task it runs as
        [id, queue, type, started (ms), deadline (ms, 0 = none)] (read by Inspector.servers)."""
        p = self.p
        return server_record.pack(
            p.server_id, socket.gethostname(), os.getpid(),
            self.ctx.served.current if self.ctx.served is not None else p.queues,
            getattr(self.processor, "concurrency", p.concurrency), p.strict_priority,
            p.started_at, [(r.id, r.queue, r.msg.type, r.started_ms, r.deadline_ms) for r in running], p.name,
            self._status(), p.version)

    def _status(self) -> str:
        if self.ctx.stopping.is_set():
            return "stopping"
        return "quiet" if getattr(self.processor, "quiet", False) else "running"

    async def beat(self) -> None:
        """One heartbeat: liveness, then lease renewal."""
        ctx, p = self.ctx, self.p
        interval = p.interval
        calls: list[Call[Any]] = [
            Call(lambda r: r, command=("ZADD", SERVERS, ctx.clock.now_ms() + int(3 * interval * 1000), p.server_id))
        ]
        running = list(self.processor.held.values())
        described = self._described_now()
        if self._beats % INFO_EVERY == 0 or described != self._described:
            calls.append(Call(lambda r: r, command=("SET", server_info(p.server_id), self._info(running), "PX",
                                                    info_ttl_ms(interval))))
            self._described = described
        self._beats += 1
        by_queue: dict[str, list[Running]] = defaultdict(list)
        for r in running:
            by_queue[r.queue].append(r)
        queues = list(by_queue)
        calls += [ctx.broker.extend(q, p.lease_ms, [(r.id, r.token, r.run_of) for r in by_queue[q]]) for q in queues]
        sent, sent_ms = asyncio.get_running_loop().time(), ctx.clock.local_ms()
        results = await ctx.exec.run_many(calls)
        if isinstance(results[0], Exception):
            ctx.health.failed("the heartbeat", results[0])
        else:
            ctx.health.ok()
            self.registered = True
            if results[0] == 1 and self._beats > 1 and len(calls) - len(queues) == 1:
                # the server was missing from the registry (Redis restarted without persistence,
                # or flushed): its description is gone too; write it now, not at the 6th beat
                await self._describe(running)
        for q, res in zip(queues, results[len(calls) - len(queues):]):
            if isinstance(res, Exception):
                ctx.health.failed(f"renewing leases in queue {q}", res)
                continue
            now_ms, lost = res
            ctx.clock.observe(now_ms, sent_ms)
            lost_ids = set(lost)
            for r in by_queue[q]:
                if r.id in lost_ids:
                    self.processor.lose(r, "another worker holds it now (its lease had expired)")
                else:
                    r.lease_until = sent + p.lease

    def _described_now(self) -> frozenset[tuple[str, str]]:
        """What the description says that may change between beats: the tasks held, the status,
        the served queues' version (a pattern's matches) and the concurrency (server scale)."""
        served = self.ctx.served.version if self.ctx.served is not None else 0
        concurrency = getattr(self.processor, "concurrency", self.p.concurrency)
        return frozenset([*self.processor.held, ("", self._status()), ("", str(served)), ("c", str(concurrency))])

    def describe_call(self) -> Call[Any]:
        """The call that writes the server's description as it is now (a control command changed
        its status: sent with the command's acknowledgement, ``server ls`` shows it at once, not
        at the next heartbeat)."""
        running = list(self.processor.held.values())
        self._described = self._described_now()  # (the next beat does not write it again)
        return Call(lambda r: r, command=("SET", server_info(self.p.server_id), self._info(running), "PX",
                                          info_ttl_ms(self.p.interval)))

    async def _describe(self, running: list[Running]) -> None:
        try:
            await self.ctx.exec.run(Call(lambda r: r, command=(
                "SET", server_info(self.p.server_id), self._info(running), "PX", info_ttl_ms(self.p.interval))))
        except REDIS_ERRORS as exc:
            self.ctx.health.failed("describing the server", exc)
            return
        log.info("server %s was missing from Redis's registry (Redis restarted?); registered it again",
                 self.p.server_id)

    def _expire_local(self) -> None:
        """Give up tasks whose lease could not be renewed in time (Redis unreachable)."""
        now = asyncio.get_running_loop().time()
        for r in list(self.processor.held.values()):
            if now >= r.lease_until:
                self.processor.lose(r, "its lease could not be renewed in time")

    def stop(self) -> None:
        """End :meth:`run` at its next turn (the server stops; it also cancels the loop's task:
        should a cancellation be lost in a client library, the loop still ends)."""
        self._stopped = True

    async def run(self) -> None:
        while not self._stopped:
            await asyncio.sleep(self.p.interval)
            try:
                await self.beat()
            except REDIS_ERRORS as exc:
                self.ctx.health.failed("the heartbeat", exc)
            except Exception:  # a bug must not stop lease renewal for good
                log.exception("heartbeat failed unexpectedly")
            self._expire_local()

    async def clear(self) -> None:
        """Remove this server from the live-server registry (at shutdown)."""
        try:
            await self.ctx.exec.run_many([
                Call(lambda r: r, command=("ZREM", SERVERS, self.p.server_id)),
                Call(lambda r: r, command=("DEL", server_info(self.p.server_id))),
            ])
        except REDIS_ERRORS as exc:
            log.warning("could not unregister server: %s", exc)
