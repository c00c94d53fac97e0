"""Canceller: cancels a running handler the moment an operator cancels its task.

``Inspector.cancel`` archives the active task in one script (cancel.lua) and, in the same
script, PUBLISHes ``[queue, id, lease token]`` on the cancel channel. The token names the run
cancelled: a later run of the same id (run again from the archive, or the id reused) holds another
token and is left alone. Every server keeps one subscribed
connection; the server holding the task cancels its handler at once and writes nothing (its late
write would be refused anyway: the task is no longer leased with its token). A message missed
while reconnecting is covered by the heartbeat: the cancelled task's next lease renewal is refused,
which cancels the handler within ``heartbeat_interval``. A durable run's cooperative cancel
(core/durable/cancelling.py) has no lease to lose: its notice is also kept a minute in Redis, and
read for the durable inputs held here each time the subscription is made. A subscribed connection
sends no command while idle.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgpack
from redis.exceptions import RedisError

from ..core.durable import cancelling
from ..core.durable.replay import TYPE_PREFIX as DURABLE_PREFIX
from ..core.processes.model import TYPE_PREFIX as PROCESS_PREFIX
from ..core.processes.model import process_of
from ..core.spine.broker import Call
from ..core.spine.keys import CANCEL_CHANNEL, CONTROL_CHANNEL, queue_keys
from .context import Context, Holder
from .control import Controller

log = logging.getLogger("asynqpy.canceller")

DURABLE_INPUTS = PROCESS_PREFIX + DURABLE_PREFIX
"""The task type prefix of a durable run's inputs."""
CLOSE_TIMEOUT = 1.0
"""Seconds the subscription's teardown may take when the server stops."""


class Canceller:
    """Also the server's remote control (``control``): the same subscription carries the control
    channel, and each idle tick looks at the server's control list."""

    def __init__(self, ctx: Context, processor: Holder, control: Controller | None = None) -> None:
        self.ctx = ctx
        self.processor = processor
        self.control = control

    def handle(self, data: Any) -> None:
        """Cancel the handler named by one notice, if this server runs it."""
        try:
            notice = msgpack.unpackb(data, raw=False, unicode_errors="surrogateescape")  # as packed
            queue, id = notice[:2]
            token = notice[2] if len(notice) > 2 else None  # None: a notice of an older version
            hash((queue, id))
        except (ValueError, TypeError, KeyError, msgpack.UnpackException):
            log.warning("ignored a malformed cancel notice: %r", data)
            return
        durable = cancelling.parse(notice)  # a durable run's step, cancelled cooperatively
        if durable is not None:
            queue, id, token, run, reason = durable
            r = self.processor.held.get((queue, id))
            log.debug("durable cancel notice: run %s, input %s (queue %s): %s", run, id, queue,
                      "held here" if r is not None and token == r.token else "not held here")
            if r is not None and token == r.token and r.aio is not None and not r.aio.done() \
                    and cancelling.request(run, id, reason):
                r.aio.cancel()  # its processor ends the run cancelled, in its own commit
            return
        r = self.processor.held.get((queue, id))
        if r is not None and (token is None or token == r.token):
            self.processor.lose(r, "cancelled by an operator (the task is archived)")

    async def kept_notices(self) -> None:
        """The durable cancel notices kept for the durable inputs this server runs (one read,
        ``QueueKeys.durable_cancel``), handled as if received: a notice published before this
        subscription (the server had just started, or was subscribing again) reaches its step."""
        held = [(q, pid) for (q, _), r in list(self.processor.held.items())
                if r.aio is not None and not r.aio.done() and r.msg.type.startswith(DURABLE_INPUTS)
                and (pid := process_of(r.msg)[0])]
        if not held:
            return
        got = await self.ctx.exec.run_many([Call(lambda v: v, command=("GET", queue_keys(q).durable_cancel(pid)))
                                            for q, pid in held])
        for data in got:
            if isinstance(data, bytes):
                self.handle(data)

    async def run(self) -> None:
        ctx = self.ctx
        backoff = 0.1
        while not ctx.stopping.is_set():
            pubsub = ctx.redis.pubsub()
            try:
                await pubsub.subscribe(CANCEL_CHANNEL, *([CONTROL_CHANNEL] if self.control else []))
                log.debug("subscribed to the cancel channel")
                await self.kept_notices()  # (published before this subscription)
                backoff = 0.1
                ctx.health.ok()
                if self.control is not None:
                    await self.control.drain()  # commands sent while this was not subscribed
                while not ctx.stopping.is_set():
                    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=ctx.block_limit)
                    if msg is not None and msg.get("type") == "message":
                        channel = msg.get("channel")
                        if channel in (CONTROL_CHANNEL, CONTROL_CHANNEL.encode()):
                            if self.control is not None and self.control.wants(msg["data"]):
                                await self.control.drain()
                        else:
                            self.handle(msg["data"])
                    elif msg is None and self.control is not None:
                        await self.control.drain()  # an idle tick: a message missed while reconnecting
            except (RedisError, OSError) as exc:
                ctx.health.failed("the cancel channel subscription (meanwhile lease renewal catches cancelled "
                                  f"tasks; retried in {backoff:.1f}s)", exc)
                if await ctx.sleep(backoff):
                    break
                backoff = min(backoff * 2, 5.0)
            finally:
                # bounded: redis-py's cluster pub/sub teardown takes locks an interrupted read may
                # still hold, and a server must stop in time whatever the client library does
                try:
                    await asyncio.wait_for(pubsub.aclose(), CLOSE_TIMEOUT)
                except (RedisError, OSError, asyncio.TimeoutError):
                    log.debug("closing the cancel channel subscription did not finish; dropped it")
