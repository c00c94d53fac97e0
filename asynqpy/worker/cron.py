"""The scheduling loop: enqueues the tasks of scheduler entries (periodic tasks) on their ticks.

Any number of these loops may run at once (in workers started with ``--scheduler``, and in
``asynqpy scheduler`` processes): each computes every entry's due tick (:func:`~asynqpy.core.cron.entries.
due_tick`) by its estimate of the Redis clock and calls the cron_fire script, which lets exactly
one call per tick enqueue the task. The loop reloads the entries from Redis every ``refresh``
seconds (so entries added, removed, paused or changed by an operator take effect within it), and
sleeps until the next tick or the next reload, whichever comes first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..core.cron import entries as cron
from ..core.cron.entries import Entry, QueueEntries
from ..core.inspector.inspection import Plan
from ..core.model.clock import Clock
from ..core.model.errors import AsynqpyError
from ..core.spine.broker import Broker, Call
from ..redisio.connection import REDIS_ERRORS
from ..redisio.executor import AsyncExecutor, arun_plan

log = logging.getLogger("asynqpy.cron")
T = TypeVar("T")

MAX_BACKOFF = 5.0


@dataclass(frozen=True)
class SchedulerParams:
    """What the scheduling loop needs: the entries declared in code (stored at start), how often
    to reload the stored entries (s), how old a tick may be and still count as late rather than
    missed (ms), and the largest payload a task may carry. ``owner``: who declares ``entries``
    (an App's ``"app:<name>"``): they are stored as its, and at start its stored entries it no
    longer declares are removed (:func:`~asynqpy.core.cron.entries.prune_plan`). ``fire``: False for a
    loop that only does that at start, then ends (an App's worker without a scheduler)."""

    entries: tuple[Entry, ...] = ()
    refresh: float = 5.0
    grace_ms: int = cron.GRACE_MS
    max_payload_bytes: int = 1 << 20
    owner: str = ""
    fire: bool = True


class Scheduling:
    """One scheduling loop (see the module docstring). ``stopping`` ends it; ``on_error`` is told
    of Redis failures (the server's health), ``on_ok`` when they end."""

    def __init__(self, exec: AsyncExecutor, broker: Broker, clock: Clock, params: SchedulerParams,
                 stopping: asyncio.Event, on_error: Callable[[str, BaseException], None] | None = None,
                 on_ok: Callable[[], None] | None = None) -> None:
        self.exec, self.broker, self.clock, self.p = exec, broker, clock, params
        self.stopping = stopping
        self.on_error, self.on_ok = on_error, on_ok
        self.state: dict[str, QueueEntries] = {}
        self._registered = not params.entries and not params.owner
        self._observed = False  # Redis's clock read once (before the entries are registered)
        self._reload_at = 0.0  # loop time of the next reload
        self.fired = 0  # ticks this loop enqueued (tests and logs)
        self._hold = 0.0  # seconds to wait before calling again for a tick Redis found early
        self._refused: set[tuple[str, str, bytes]] = set()  # entries not fired (bad signature), logged once

    async def _plan(self, plan: Plan[T]) -> T:
        return await arun_plan(self.exec, plan)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.1
        while not self.stopping.is_set():
            try:
                if not self._observed:
                    await self._observe_time(self.clock.local_ms())
                    self._observed = True
                if not self._registered:
                    await self._register()
                if not self.p.fire:
                    return
                if loop.time() >= self._reload_at:
                    await self._reload()
                await self._fire_due()
                if self.on_ok is not None:
                    self.on_ok()
                backoff = 0.1
                delay = self._next_wait()
            except REDIS_ERRORS as exc:
                if self.on_error is not None:
                    self.on_error("running scheduler entries", exc)
                else:
                    log.warning("scheduler: Redis failed (%s); retrying in %.1fs", exc, backoff)
                delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF)
            except AsynqpyError as exc:  # an entry that cannot be enqueued (Redis full, ...)
                log.error("scheduler: %s", exc)
                delay, backoff = backoff, min(backoff * 2, MAX_BACKOFF)
            try:
                await asyncio.wait_for(self.stopping.wait(), max(0.0, delay))
            except asyncio.TimeoutError:
                pass

    async def _register(self) -> None:
        """Store the entries declared in code (as the owner's), then remove the owner's stored
        entries no longer declared."""
        declared = [replace(e, owner=self.p.owner) for e in self.p.entries]
        if declared:
            stored = await self._plan(cron.register_plan(declared, self.clock.now_ms(), self.broker.signer))
            log.info("scheduler entries declared in code: %s", ", ".join(f"{e.name} ({e.spec()})" for e in stored))
        if self.p.owner:
            for e in await self._plan(cron.prune_plan(self.broker, self.p.owner, declared)):
                log.warning("scheduler entry %s of queue %s (%s, %s) removed: %s declared it and no longer does",
                            e.name, e.queue, e.task_type, e.spec(), self.p.owner)
        self._registered = True

    async def _reload(self) -> None:
        sent = self.clock.local_ms()
        self.state = await self._plan(cron.load_plan(self.broker.signer))
        self._reload_at = asyncio.get_running_loop().time() + self.p.refresh
        refused: set[tuple[str, str, bytes]] = set()
        for q, qe in self.state.items():
            for name, why in qe.unreadable.items():
                log.error("scheduler entry %s of queue %s skipped: %s", name, q, why)
            for name, (data, _) in qe.defs.items():
                bad = qe.refused(name)
                if bad is not None:  # said once per stored definition, not at every reload
                    refused.add((q, name, data))
                    if (q, name, data) not in self._refused:
                        log.error("scheduler entry %s of queue %s is not fired: %s (a scheduler with signing keys "
                                  "fires only entries signed with them; add it again with the key)", name, q, bad)
        self._refused = refused
        await self._observe_time(sent)

    async def _observe_time(self, sent: int) -> None:
        if self.clock.script_now():
            return  # a simulated clock (tests)
        secs, usecs = await self.exec.redis.time()  # (on a cluster: any node; its clock is the one used)
        self.clock.observe(int(secs) * 1000 + int(usecs) // 1000, sent)

    def _entries(self) -> list[tuple[QueueEntries, str, bytes, Entry]]:
        return [(qe, name, data, e) for qe in self.state.values() for name, (data, e) in qe.defs.items()
                if name not in qe.paused and qe.refused(name) is None]

    async def _fire_due(self) -> None:
        now = self.clock.now_ms()
        due: list[tuple[QueueEntries, Entry, int, str]] = []
        calls: list[Call[Any]] = []
        for qe, name, data, e in self._entries():
            for tick in cron.due_ticks(e, qe.last.get(name, 0), now, self.p.grace_ms):  # oldest first
                try:
                    id, call = cron.fire_call(self.broker, e, data, tick, now)
                except AsynqpyError as exc:  # its payload no longer fits this scheduler's limits
                    log.error("scheduler entry %s of queue %s: %s", name, e.queue, exc)
                    qe.last[name] = tick
                    break
                due.append((qe, e, tick, id))
                calls.append(call)
        if not calls:
            return
        sent = self.clock.local_ms()
        replies = await self.exec.run_many(calls)  # one pipeline: an entry's ticks run in order
        reload = False
        for (qe, e, tick, id), reply in zip(due, replies):
            if isinstance(reply, BaseException):
                if isinstance(reply, REDIS_ERRORS):
                    raise reply
                log.error("scheduler entry %s of queue %s: tick %s not enqueued: %s", e.name, e.queue, tick, reply)
                continue
            code, redis_now = reply
            self.clock.observe(redis_now, sent)
            if code == cron.FIRED:
                self.fired += 1
                qe.last[e.name] = max(tick, qe.last.get(e.name, 0))
                late = redis_now - tick
                log.log(logging.INFO if late >= 1000 else logging.DEBUG, "scheduler entry %s enqueued task %s "
                        "(%d ms after its tick)", e.name, id, late)
            elif code == cron.ALREADY:
                qe.last[e.name] = max(tick, qe.last.get(e.name, 0))
            elif code == cron.PAUSED:
                qe.paused.add(e.name)
            elif code in (cron.GONE, cron.CHANGED):
                reload = True
            elif code == cron.EARLY:  # this host's estimate ran ahead of Redis's clock (observe() corrected it)
                self._hold = max(self._hold, (tick - redis_now) / 1000)
        if reload:
            self._reload_at = 0.0

    def _next_wait(self) -> float:
        """Seconds until the next tick of any entry, or the next reload if sooner."""
        loop_now = asyncio.get_running_loop().time()
        wait = max(0.0, self._reload_at - loop_now)
        now = self.clock.now_ms()
        for qe, name, _, e in self._entries():
            if cron.due_tick(e, qe.last.get(name, 0), now, self.p.grace_ms) is not None:
                hold, self._hold = self._hold, 0.0
                return hold  # more to catch up on (ticks beyond a call's limit), or refused as early
            nxt = e.first_after(max(now - 1, qe.last.get(name, 0)))
            if nxt is not None:
                wait = min(wait, max(0.0, (nxt - now) / 1000))
        return wait


def entries_of(entries: Sequence[Entry]) -> tuple[Entry, ...]:
    """Entries declared in code, refused if two share a queue and name."""
    seen: set[tuple[str, str]] = set()
    for e in entries:
        if (e.queue, e.name) in seen:
            raise AsynqpyError(f"two scheduler entries are named {e.name!r} in queue {e.queue!r}")
        seen.add((e.queue, e.name))
    return tuple(entries)
