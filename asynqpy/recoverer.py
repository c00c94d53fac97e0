"""Recoverer: finds active tasks whose lease expired (their worker crashed or stalled) and retries
them (retry count + 1, error "lease expired"), or archives them when no retries are left.

It sleeps until the earliest lease expiry the expired script reports (Redis clock), never longer
than a third of the lease, so a crashed worker's tasks are reclaimed within milliseconds of their
lease's expiry. The retry/archive script re-checks the expiry atomically: a lease renewed in the
meantime is left alone."""

from __future__ import annotations

import logging

from . import codec
from .errors import LeaseLostError, MalformedMessageError, SignatureError, TaskNotFoundError
from .server import Context
from .signing import open_message

log = logging.getLogger("asynqpy.recoverer")

LEASE_EXPIRED = "lease expired: the worker running this task stopped renewing its lease (crashed or stalled)"


class Recoverer:
    def __init__(self, ctx: Context, batch: int = 100) -> None:
        self.ctx = ctx
        self.batch = batch

    async def recover_once(self) -> float:
        """Recover expired leases in every queue; returns seconds until the next may expire."""
        ctx = self.ctx
        wait = ctx.options.recover_every
        for q in ctx.queues:
            res = await ctx.exec.run(ctx.broker.expired(q, self.batch))
            for id, value in res.tasks:
                await self._recover(q, id, value, res.now_ms)
            if len(res.tasks) >= self.batch:
                wait = 0.0
            elif res.next_ms >= 0:
                wait = min(wait, res.next_ms / 1000 + 0.002)
        return wait

    async def _recover(self, queue: str, id: str, value: bytes | None, now_ms: int) -> None:
        ctx = self.ctx
        b = ctx.broker
        if value is None or value[:1] != b"a":
            if await ctx.exec.run(b.drop(queue, id)) == 1:
                log.warning("dropped a lease on task %s (queue %s) whose task is not active", id, queue)
            return
        trusted = True
        try:
            failed = open_message(b.signer, queue, id, value[9:]).with_(last_error=LEASE_EXPIRED,
                                                                         last_failed_at_ms=now_ms)
        except (MalformedMessageError, SignatureError) as exc:  # never retried (nor re-signed)
            failed, trusted = codec.untrusted(value[9:], str(exc), now_ms), False
        try:
            if not trusted or failed.retried >= failed.max_retry:
                o = ctx.options
                await ctx.exec.run(b.archive(queue, id, "", failed, o.archive_max_size,
                                             int(o.archive_max_age * 1000), trusted))
                log.warning("task %s (queue %s): %s; archived", id, queue, failed.last_error)
            else:
                await ctx.exec.run(b.retry(queue, id, "", failed.with_(retried=failed.retried + 1), 0))
                log.warning("task %s (queue %s): lease expired; retrying it now (attempt %d)",
                            id, queue, failed.retried + 2)
        except (LeaseLostError, TaskNotFoundError):
            pass  # renewed, or finished, or recovered by another server in the meantime

    async def run(self) -> None:
        await self.ctx.repeat("recovering expired leases", self.recover_once, error_wait=1.0)
