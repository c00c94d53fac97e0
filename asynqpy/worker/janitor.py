"""Janitor: deletes completed tasks whose retention is over and trims the archive to its limits,
in bounded batches, sleeping until the next retention expiry (at most ``janitor_interval``).

It also runs each queue's consistency sweep: its tasks (``reconcile`` script, one HSCAN step of
200 tasks per call, 10 ms apart) put back where their state says when state and container
disagree (keys removed or corrupted by hand), and the entries of tasks that are gone forgotten
(``forget_gone``, :func:`~asynqpy.core.limits.serial.sweep_keys`), so nothing stays stuck. The sweep is
shared by every worker serving the queue (lua/sweep.lua): whoever holds the queue's sweep lease
takes the next step from the cursors stored in the queue's slot and stores the next ones, so one
sweep runs per queue every ``reconcile_interval`` (counted from the end of the last, as recorded
in Redis: a worker's start does not start one), whatever the number of workers; a holder that
dies leaves its lease to expire, and another goes on where it stopped. Expiry and trimming keep
their own schedule: a sweep's steps do not repeat them."""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from ..core.limits.serial import sweep_keys
from ..core.spine.broker import TRIM_PER_CALL, Call
from ..core.spine.keys import queue_keys
from ..redisio.connection import REDIS_ERRORS
from ..redisio.executor import arun_plan
from .chores import chore_pass
from .context import Context
from .queues import COLD_CHECKS_PER_S, Cadence
from .settings import ServerOptions

log = logging.getLogger("asynqpy.janitor")

PARTS = ("tasks", "watch", "children", "deps", "keys", "tenant_active", "tenant_ring")
"""The parts of a queue's sweep, each with its own cursor: its tasks (``reconcile``), its watch,
children and deps hashes (``forget_gone``), its held keys (``sweep_keys``), and its tenants'
active entries and ready ring (``tenant_fix``)."""
_TENANT_PARTS = {"tenant_active": "active", "tenant_ring": "ring"}
STEP_PAUSE = 0.01
"""Seconds between two steps of a sweep."""


def _advance(cursors: dict[str, str], kind: str, cursor: str) -> None:
    """A part of a sweep moves on to ``cursor``; at "0" it is over."""
    if cursor == "0":
        del cursors[kind]
    else:
        cursors[kind] = cursor


def _report(q: str, kind: str, res: Any) -> str:
    """Log what a sweep step of part ``kind`` repaired or forgot; returns its next cursor."""
    cursor: str = res[0]
    found = res[1]
    if kind == "tasks":
        for id, what in found:
            log.warning("repaired task %s (queue %s): %s", id, q, what)
    elif kind in _TENANT_PARTS:
        for name, what in found:
            log.warning("repaired the tenants of queue %s: %s %s", q, name, what)
    elif found:
        what = {"watch": "the waiters", "children": "the children", "deps": "the parents"}[kind]
        log.info("forgot %s of %d task(s) that are gone (queue %s)", what, found, q)
    return cursor


@dataclass(frozen=True)
class JanitorParams:
    """What the janitor reads: the queues, its longest sleep, the archive's limits, how often the
    consistency sweep runs (0 = never), batch sizes, the longest lease on a queue's sweep (a
    holder that stops taking steps leaves it to another after this long; at most the interval,
    at least a second) and how often its holder stores its cursors and renews it (at least
    three times a lease; a successor redoes the steps since: they are idempotent)."""

    queues: tuple[str, ...]
    interval: float
    archive_max_size: int
    archive_max_age: float
    reconcile_interval: float
    batch: int = 100
    sweep_step: int = 200
    sweep_lease: float = 30.0
    sweep_save: float = 1.0

    @classmethod
    def of(cls, o: ServerOptions) -> JanitorParams:
        return cls(tuple(o.queues), o.janitor_interval, o.archive_max_size,
                   o.archive_max_age, o.reconcile_interval)


class Janitor:
    def __init__(self, ctx: Context, params: JanitorParams) -> None:
        self.ctx = ctx
        self.p = params
        self.owner = secrets.token_hex(8)  # this janitor's name on the sweep leases it holds
        self._held: dict[str, dict[str, str]] = {}  # queue whose sweep lease we hold -> part -> cursor
        self._due: dict[str, float] = {}  # queue -> loop time its sweep lease is next asked for
        self._saved: dict[str, float] = {}  # queue whose sweep lease we hold -> loop time of its last store
        self._next_clean = 0.0  # loop time expire and trim are next due
        self._cadence = Cadence(params.queues, params.interval, COLD_CHECKS_PER_S)  # (_clean: which queues)

    def _lease_ms(self) -> tuple[int, int]:
        interval = self.p.reconcile_interval
        return int(min(self.p.sweep_lease, max(1.0, interval)) * 1000), max(1, int(interval * 1000))

    async def sweep_once(self) -> float:
        """Ask for the sweep lease of each queue whose sweep may be due, then take one step of the
        sweep of each queue whose lease this janitor holds: its tasks (reconcile), its watch,
        children and deps hashes (entries of tasks that are gone) and its held keys, going on
        from the cursors stored in Redis (stored again about once a second, and at the sweep's
        end). Returns seconds until the next step, or until a lease is next worth asking for."""
        ctx, p = self.ctx, self.p
        if not p.reconcile_interval:
            return float("inf")
        loop = asyncio.get_running_loop()
        lease_ms, interval_ms = self._lease_ms()
        now = loop.time()
        queues = self._cadence.queues  # (the served queues, which queues found by a pattern change)
        ask = [q for q in queues if q not in self._held and self._due.get(q, 0.0) <= now]
        if ask:
            replies = await ctx.exec.run_many([ctx.broker.sweep_claim(q, self.owner, lease_ms, interval_ms, PARTS)
                                               for q in ask])
            for q, lease in zip(ask, replies):
                if isinstance(lease, Exception):
                    ctx.health.failed(f"consistency sweep of queue {q}", lease)
                    self._due[q] = now + min(5.0, p.reconcile_interval)
                elif lease.code == 1:
                    self._held[q] = {k: v for k, v in lease.cursors.items() if k in PARTS}
                    self._saved[q] = now
                else:
                    self._due[q] = now + lease.ms / 1000
        if self._held:
            await self._step()
        now = loop.time()
        if self._held:
            return STEP_PAUSE
        # (no queue, as with a pattern that matches none yet: no sweep is due)
        return max(0.0, min((self._due.get(q, now) for q in queues), default=float("inf")) - now)

    async def _step(self) -> None:
        """One step of each held sweep; its cursors stored (and its lease renewed) when it ended or
        ``sweep_save`` seconds after the last store."""
        await self._step_keys()
        await self._step_parts()
        await self._save()

    async def _step_keys(self) -> None:
        """The sweep's step over the keys held by tasks that ended (a plan of its own, per queue)."""
        ctx, p = self.ctx, self.p
        for q, cursors in self._held.items():
            if "keys" not in cursors:
                continue
            try:
                cursor, freed = await arun_plan(ctx.exec, sweep_keys(ctx.broker, q, cursors["keys"], p.sweep_step))
            except REDIS_ERRORS as exc:
                ctx.health.failed(f"consistency sweep of queue {q}", exc)
                del cursors["keys"]
                continue
            if freed:
                log.warning("released %d key(s) of queue %s whose task ended without releasing them", freed, q)
            _advance(cursors, "keys", cursor)

    async def _step_parts(self) -> None:
        """The sweep's step over its other parts (tasks, tenants, the watch, children and deps
        hashes), one script call each, in one pipeline."""
        ctx, p, held = self.ctx, self.p, self._held
        steps = [(q, kind) for q, cursors in held.items() for kind in cursors if kind != "keys"]
        results = await ctx.exec.run_many([
            ctx.broker.reconcile(q, held[q][kind], p.sweep_step) if kind == "tasks"
            else ctx.broker.tenant_fix(q, _TENANT_PARTS[kind], held[q][kind], p.sweep_step) if kind in _TENANT_PARTS
            else ctx.broker.forget_gone(q, kind, held[q][kind], p.sweep_step) for q, kind in steps])
        for (q, kind), res in zip(steps, results):
            if isinstance(res, Exception):
                ctx.health.failed(f"consistency sweep of queue {q}", res)
                del held[q][kind]
                continue
            _advance(held[q], kind, _report(q, kind, res))

    async def _save(self) -> None:
        """Store the cursors of the sweeps that ended or are due a store (renewing their lease);
        a sweep whose lease is lost, or that ended, is let go of until it is due again."""
        ctx, p, held = self.ctx, self.p, self._held
        lease_ms, interval_ms = self._lease_ms()
        now = asyncio.get_running_loop().time()
        every = min(p.sweep_save, lease_ms / 3000)
        queues = [q for q in held if not held[q] or now - self._saved[q] >= every]  # ended, or time to store
        if not queues:
            return
        saved = await ctx.exec.run_many([ctx.broker.sweep_save(q, self.owner, lease_ms, interval_ms, held[q])
                                         for q in queues])
        for q in queues:
            self._saved[q] = now
        for q, lease in zip(queues, saved):
            if isinstance(lease, Exception):  # ask again soon: the lease is still ours for a while
                ctx.health.failed(f"consistency sweep of queue {q}", lease)
                del held[q]
                self._due[q] = now + min(5.0, p.reconcile_interval)
            elif lease.code != 1:  # the sweep ended, or another holds it now
                del held[q]
                self._due[q] = now + lease.ms / 1000

    async def clean_once(self) -> float:
        """Expire completed tasks and trim the archive when due (at the next retention expiry, at
        most ``janitor_interval`` apart), and take a step of the consistency sweep; returns
        seconds until the next pass."""
        now = asyncio.get_running_loop().time()
        if now >= self._next_clean:
            wait = await self._clean()
            self._next_clean = now + wait
        else:
            wait = self._next_clean - now
        return min(wait, await self.sweep_once())

    async def _clean(self) -> float:
        """Expire completed tasks and trim the archive of the queues due for a look (their own
        schedule, :class:`~asynqpy.worker.queues.Cadence`: a queue with completed tasks when the
        next expires, at most ``janitor_interval`` on; one with neither completed nor archived
        tasks at a cold check, one ``EXISTS``, spread over time when it serves many queues)."""
        return await chore_pass(self._cadence, self.ctx.exec.run_many,
                                lambda q: (queue_keys(q).completed, queue_keys(q).archived), self._clean_queues,
                                self.ctx.served)

    async def _clean_queues(self, queues: list[str], now: float) -> float:
        ctx, p, cadence = self.ctx, self.p, self._cadence
        others = cadence.next_in(now)
        wait = p.interval
        calls: list[Call[Any]] = [ctx.broker.expire(q, p.batch) for q in queues]
        calls += [ctx.broker.trim(q, p.archive_max_size, int(p.archive_max_age * 1000)) for q in queues]
        results = await ctx.exec.run_many(calls)
        done = asyncio.get_running_loop().time()
        n = len(queues)
        for q, res, trimmed in zip(queues, results[:n], results[n:]):
            here: float | None = None
            if isinstance(res, Exception):
                ctx.health.failed("expiring completed tasks", res)
                here = p.interval
            else:
                deleted, next_ms = res
                if deleted >= p.batch:
                    here = 0.0
                elif next_ms >= 0:
                    here = min(p.interval, next_ms / 1000 + 0.01)
            if isinstance(trimmed, int) and trimmed >= TRIM_PER_CALL:  # more may be left: again at once
                here = 0.0
            if here is None:  # nothing left to expire: a cold check next (which sees the archive)
                cadence.idle(q, done)
            else:
                cadence.at(q, done + here)
                wait = min(wait, here)
        return min(wait, others)

    async def run(self) -> None:
        await self.ctx.repeat("janitor pass", self.clean_once, error_wait=5.0, loop="janitor")
