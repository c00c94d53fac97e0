"""A server's side of remote control (see :mod:`asynqpy.core.server.control`): pops the commands of
its control list, applies them (quiet, resume, stop, concurrency=N) and acknowledges each. Woken by the cancel
loop's subscription (the control channel names this server), and looked at on every idle tick
of that subscription, so a message missed while reconnecting delays a command, never loses it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..core.server import control
from ..core.spine.broker import Call
from ..core.spine.keys import control_list
from ..redisio.connection import REDIS_ERRORS
from .context import Context

log = logging.getLogger("asynqpy.control")


class Quietable(Protocol):
    quiet: bool

    async def set_quiet(self, quiet: bool) -> None: ...

    async def set_concurrency(self, concurrency: int) -> None: ...


class Controller:
    """``describe``: the call writing the server's description (the heartbeat's), sent in the same
    round trip as a command's acknowledgement (before it, in one pipeline), so an operator who got
    the answer sees the new status in ``server ls`` at once. One round trip, not two: a stop lets
    the server shut down, which cancels this loop, and the acknowledgement must not wait behind
    another call."""

    def __init__(self, ctx: Context, server_id: str, processor: Quietable,
                 describe: Callable[[], Call[Any]] | None = None) -> None:
        self.ctx = ctx
        self.server_id = server_id
        self.processor = processor
        self.describe = describe
        self.key = control_list(server_id)

    async def drain(self) -> None:
        """Apply the commands waiting for this server, in order."""
        while True:
            raw = await self.ctx.exec.run(Call(lambda r: r, command=("LPOP", self.key)))
            if raw is None:
                return
            try:
                cid, action = control.unpack_command(raw)
            except ValueError as exc:
                log.warning("%s", exc)
                continue
            # a stop is acknowledged before it is applied: stopping cancels this loop, which lost
            # an acknowledgement still on its way (the operator's stop_server timed out)
            stop = action == "stop" and not self.ctx.stopping.is_set()
            outcome = "stopping" if stop else await self.apply(action)
            described = [self.describe()] if self.describe is not None and not stop else []
            try:
                replies = await self.ctx.exec.run_many([*described, *control.ack_calls(cid, outcome)])
            finally:
                if stop:
                    await self.apply(action)
            if described and isinstance(replies[0], REDIS_ERRORS):  # the next heartbeat writes it
                log.warning("could not write the server's new status (%s): the next heartbeat will", replies[0])

    async def apply(self, action: str) -> str:
        if action == "quiet":
            log.warning("quiet (asked by an operator): taking no new task; running tasks go on")
            await self.processor.set_quiet(True)
            return "quiet"
        if action == "resume":
            if self.ctx.stopping.is_set():
                return "stopping"
            log.warning("resumed (asked by an operator): taking tasks again")
            await self.processor.set_quiet(False)
            return "running"
        if action == "stop":
            if not self.ctx.stopping.is_set():
                log.warning("stop (asked by an operator): shutting down gracefully")
                self.ctx.stopping.set()
            return "stopping"
        n = control.concurrency_of(action)
        if n is not None:
            log.warning("concurrency %d (asked by an operator)", n)
            await self.processor.set_concurrency(n)
            return f"concurrency {n}"
        log.warning("ignored an unknown control action %r", action)
        return f"unknown action {action!r}"

    def wants(self, data: Any) -> bool:
        """Whether a control channel message is for this server."""
        got = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
        return got == self.server_id
