"""Recoverer: finds active tasks whose lease expired (their worker crashed or stalled) and retries
them (retry count + 1, error "lease expired"), or archives them when no retries are left.

It sleeps until the earliest lease expiry the expired script reports (Redis clock), never longer
than a third of the lease, so a crashed worker's tasks are reclaimed within milliseconds of their
lease's expiry. The retry/archive script re-checks the expiry atomically: a lease renewed in the
meantime is left alone.

Each queue is looked at on its own schedule (:class:`~asynqpy.worker.queues.Cadence`): a queue
with leases, or one this server took tasks of (:meth:`Recoverer.touch`), at least every third of
the lease; one with none (and no outbox) at a cold check (one ``EXISTS``), all of them together at
most :data:`~asynqpy.worker.queues.COLD_CHECKS_PER_S` a second."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..core.model import codec
from ..core.model.errors import AsynqpyError, LeaseLostError, MalformedMessageError, SignatureError, TaskNotFoundError
from ..core.results.plans import pack_outcome, wake_calls
from ..core.security.signing import run_message
from ..core.spine.broker import Acted, Finished
from ..core.spine.keys import queue_keys
from ..core.spine.stored import is_active, message_of, token_of
from ..redisio.connection import REDIS_ERRORS
from .chores import chore_pass
from .context import Context
from .queues import COLD_CHECKS_PER_S, Cadence
from .settings import ServerOptions

log = logging.getLogger("asynqpy.recoverer")

ERROR_WAIT = 1.0
"""Seconds until the next pass after a failure."""
LEASE_EXPIRED = "lease expired: the worker running this task stopped renewing its lease (crashed or stalled)"


@dataclass(frozen=True)
class RecovererParams:
    """What the recoverer reads: the queues, its longest sleep, the archive's limits (a task out of
    retries is archived), how many expired leases a call reads."""

    queues: tuple[str, ...]
    every: float
    archive_max_size: int
    archive_max_age: float
    batch: int = 100

    @classmethod
    def of(cls, o: ServerOptions) -> RecovererParams:
        return cls(tuple(o.queues), o.recover_every, o.archive_max_size, o.archive_max_age)


class Recoverer:
    def __init__(self, ctx: Context, params: RecovererParams) -> None:
        self.ctx = ctx
        self.p = params
        self._cadence = Cadence(params.queues, params.every, COLD_CHECKS_PER_S)

    def touch(self, queue: str) -> None:
        """This server took tasks of ``queue``: look at its leases within a third of the lease."""
        self._cadence.soon(queue, asyncio.get_running_loop().time())

    async def recover_once(self) -> float:
        """Recover expired leases in every queue; returns seconds until the next may expire.

        A failure is confined to what failed: a queue whose expired leases cannot be read, or a
        task whose retry/archive fails (Redis full, a bug, a hand-written value), is logged (one
        line per queue and pass) and tried again on the next pass (within a second), while the
        other tasks and queues are served."""
        return await chore_pass(self._cadence, self.ctx.exec.run_many,
                                lambda q: (queue_keys(q).lease, queue_keys(q).outbox), self._recover_once,
                                self.ctx.served)

    async def _recover_once(self, queues: list[str], now: float) -> float:
        ctx, p, cadence = self.ctx, self.p, self._cadence
        others = cadence.next_in(now)
        wait = p.every
        errors = 0
        for q in queues:
            try:
                res = await ctx.exec.run(ctx.broker.expired(q, p.batch))
                if res.outbox:  # parents' ends not delivered yet (a propagator died, or an operator acted)
                    ctx.kick_outbox(q)
            except Exception as exc:  # noqa: BLE001 - the other queues are still recovered
                self._failed(q, 1, exc)
                errors += 1
                cadence.at(q, asyncio.get_running_loop().time() + ERROR_WAIT)
                continue
            failed: list[BaseException] = []
            for id, value in res.tasks:
                try:
                    await self._recover(q, id, value, res.now_ms)
                except Exception as exc:  # noqa: BLE001 - one task must not stop the others
                    failed.append(exc)
            here: float | None = None
            if len(res.tasks) >= p.batch and len(failed) < len(res.tasks):
                here = 0.0
            elif res.next_ms >= 0:
                here = min(p.every, res.next_ms / 1000 + 0.002)
            elif res.tasks or res.outbox:
                here = p.every
            if failed:
                self._failed(q, len(failed), failed[0])
                errors += 1
                here = min(here if here is not None else ERROR_WAIT, ERROR_WAIT)
            done = asyncio.get_running_loop().time()
            if here is None:
                cadence.idle(q, done)
            else:
                cadence.at(q, done + here)
                wait = min(wait, here)
        wait = min(wait, others)
        return min(wait, ERROR_WAIT) if errors else wait

    def _failed(self, queue: str, n: int, exc: BaseException) -> None:
        if isinstance(exc, REDIS_ERRORS):
            self.ctx.health.failed(f"recovering {n} task(s) in queue {queue}", exc)
        elif isinstance(exc, AsynqpyError):
            log.warning("recovering %d task(s) in queue %s failed (%s); trying again", n, queue, exc)
        else:
            log.error("recovering %d task(s) in queue %s failed unexpectedly; trying again", n, queue,
                      exc_info=exc)

    async def _recover(self, queue: str, id: str, value: bytes | None, now_ms: int) -> None:
        ctx = self.ctx
        b = ctx.broker
        if value is None or not is_active(value):
            if await ctx.exec.run(b.drop(queue, id)) == Acted.OK:
                log.warning("dropped a lease on task %s (queue %s) whose task is not active", id, queue)
            return
        token = token_of(value)  # the run whose lease expired: a later run of this id is left alone
        trusted = True
        run_of = ""
        try:
            msg, run_of = run_message(b.signer, queue, id, message_of(value))
            failed = msg.with_(last_error=LEASE_EXPIRED, last_failed_at_ms=now_ms)
        except (MalformedMessageError, SignatureError) as exc:  # never retried (nor re-signed)
            failed, trusted = codec.untrusted(message_of(value), str(exc), now_ms), False
        try:
            if run_of:  # a run of a targeted task: another worker takes its place
                await ctx.exec.run(b.run_end(queue, run_of, msg, "e", run=id, token=token, recover=True,
                                             failed=failed))
                log.warning("run %s of targeted task %s (queue %s): lease expired", id, run_of, queue)
                return
            if not trusted or failed.retried >= failed.max_retry:
                p = self.p
                outcome = pack_outcome(id, False, failed.last_error)
                res = await ctx.exec.run(b.archive(queue, id, token, failed, p.archive_max_size,
                                                   int(p.archive_max_age * 1000), trusted, recover=True,
                                                   outcome=outcome if failed.reply_to else b""))
                log.warning("task %s (queue %s): %s; archived", id, queue, failed.last_error)
                wakes = [b.reply(queue, inbox, outcome) for inbox in res.late] if isinstance(res, Finished) else []
                wakes += wake_calls(b, queue, res)  # waiters that began after the enqueue; a run's
                if wakes:
                    await ctx.exec.run_many(wakes)
            else:
                await ctx.exec.run(b.retry(queue, id, token, failed.with_(retried=failed.retried + 1), 0,
                                           recover=True))
                log.warning("task %s (queue %s): lease expired; retrying it now (attempt %d)",
                            id, queue, failed.retried + 2)
        except (LeaseLostError, TaskNotFoundError):
            pass  # renewed, or finished, or recovered by another server in the meantime

    async def run(self) -> None:
        await self.ctx.repeat("recovering expired leases", self.recover_once, error_wait=1.0, loop="recoverer")
