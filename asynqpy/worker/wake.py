"""The idle wait of a worker, with its next dequeue pipelined behind it.

An idle worker sends, in one write on a connection of its own: ``CLIENT ID``, ``BLPOP`` on its
queues' wake lists, and (serving a few queues) a ``dequeue`` script call of its first choice; a
worker of many queues leaves the dequeue out and dequeues, after, the queue whose token fired.
Redis answers CLIENT ID at once, blocks on the BLPOP, and the moment a token arrives (or the wait
times out) runs the dequeue: the worker gets its first task in the very round trip that woke it.
To stop a waiting worker, :meth:`unblock` sends ``CLIENT UNBLOCK`` from another connection; the
BLPOP then returns as if timed out and the dequeue's reply arrives normally, so no dequeued task
is ever lost to a cancelled read.

A single server only, plain or Sentinel-managed (a cluster cannot BLPOP keys of several slots in
one command). After a Sentinel failover the connection fails (the old master is gone, or demoted:
BLPOP and the script then get READONLY, which redis-py's Sentinel connection turns into a
connection error); it is dropped and the next wait takes a new one, which asks the sentinels for
the master.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import ResponseError

from ..core.spine.broker import Call, Dequeued
from ..redisio.replies import missed, script_args
from .context import Context


class PipelinedWait:
    """One dedicated connection for the idle wait (see the module docstring)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._conn: Any = None
        self._client_id: int | None = None
        self._blocked = False

    async def wait(self, wake_keys: list[str], timeout: float,
                   dequeue: Call[Dequeued] | None) -> tuple[str | None, Dequeued | None, float]:
        """Block until a wake token (or ``timeout``), then dequeue (unless ``dequeue`` is None: a
        worker of many queues dequeues the one whose token fired, after). Returns (the wake key
        that fired, or None), the dequeue's result (None without one), and the loop time from which
        its leases count.

        That time is when the wait ended (the dequeue runs right after the BLPOP), less one round
        trip (CLIENT ID's, measured on the same write): never the time the wait began, which after
        a long idle wait would make the worker think a fresh lease was already over."""
        loop = asyncio.get_running_loop()
        pool = self.ctx.redis.connection_pool
        if self._conn is None:
            self._conn = await pool.get_connection()
        conn = self._conn
        timeout = min(max(timeout, 0.01), self.ctx.block_limit)
        commands: list[Any] = [("CLIENT", "ID"), ("BLPOP", *wake_keys, timeout)]
        functions = self.ctx.exec.functions  # (as the executor sends its calls: FCALL, or EVALSHA)
        if dequeue is not None:
            commands.append(script_args(dequeue, functions))
        try:
            sent = loop.time()
            await conn.send_packed_command(conn.pack_commands(commands))
            self._client_id = int(await conn.read_response())
            rtt = loop.time() - sent
            self._blocked = True
            try:
                popped = await conn.read_response()
            finally:
                self._blocked = False
            lease_from = max(sent, loop.time() - rtt)
            if dequeue is None:
                return self._key(popped), None, lease_from
            try:
                reply = await conn.read_response()
            except ResponseError as exc:  # it did not run (a restarted server: no function or script;
                if not missed(exc, functions):  # functions refused): the executor's way, loading it
                    raise
                lease_from = loop.time()
                return self._key(popped), await self.ctx.exec.run(dequeue), lease_from
        except BaseException:
            self._conn = None
            await conn.disconnect()
            await pool.release(conn)
            raise
        return self._key(popped), dequeue.parse(reply), lease_from

    @staticmethod
    def supported(redis: Any) -> bool:
        """A plain or Sentinel-managed redis-py asyncio client of a real server (not a cluster, not
        fakeredis, which has no CLIENT UNBLOCK)."""
        return type(redis).__name__ == "Redis" and type(redis).__module__.startswith("redis.")

    @staticmethod
    def _key(popped: Any) -> str | None:
        if not popped:
            return None
        key = popped[0]
        return key.decode() if isinstance(key, bytes) else str(key)

    @property
    def blocked(self) -> bool:
        return self._blocked

    async def unblock(self) -> None:
        """Make a blocked wait return now (it still completes its dequeue)."""
        if self._client_id is not None:
            await self.ctx.redis.execute_command("CLIENT", "UNBLOCK", self._client_id)

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.shield(self.ctx.redis.connection_pool.release(conn))
