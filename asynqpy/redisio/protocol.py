"""The protocol check against Redis (core/spine/protocol.py says what it decides): one GET of the
global key ``asynqpy:protocol`` (and, for a writer finding it absent, one ``SET NX``), once per
client and once per worker start.

:class:`GuardedSyncExecutor` and :class:`GuardedAsyncExecutor` are the executors of the clients
and inspectors: their first call (any of ``run``, ``run_many``, ``run_many_replicated``) checks the
store first, so a store of a newer protocol is refused before anything is written; after that
one check (which passed) a call costs one attribute test more. A worker checks at start
(``asynqpy.server``, before its first write).

The key is a plain STRING in its own cluster slot: only plain commands read and write it, never a
script (a script may touch one slot only). The ACL roles of docs/security.md may read it (the
control role: ``~asynqpy:protocol``); a role refused the ``SET`` leaves an absent key for a writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from redis.exceptions import NoPermissionError

from ..core.spine.broker import Call
from ..core.spine.keys import PROTOCOL
from ..core.spine.protocol import ABSENT_MEANS, read_version
from .executor import AsyncExecutor, SyncExecutor

T = TypeVar("T")


def _same(reply: Any) -> Any:
    return reply


GET = Call(_same, command=("GET", PROTOCOL))
STAMP = Call(_same, command=("SET", PROTOCOL, str(ABSENT_MEANS), "NX"))


def check(executor: SyncExecutor, stamp: bool) -> int:
    """The store's protocol version, read with ``executor`` (a plain SyncExecutor: unguarded);
    ``stamp``: a writer stamps an absent key. Raises ProtocolVersionError, or the Redis error of
    the GET."""
    raw = SyncExecutor.run(executor, GET)
    if raw is None and stamp:
        try:
            if not SyncExecutor.run(executor, STAMP):  # another writer stamped it meanwhile
                raw = SyncExecutor.run(executor, GET)
        except NoPermissionError:  # a role that may not write it: the next writer stamps it
            pass
    return read_version(raw)


async def acheck(executor: AsyncExecutor, stamp: bool) -> int:
    """Async twin of :func:`check`."""
    raw = await AsyncExecutor.run(executor, GET)
    if raw is None and stamp:
        try:
            if not await AsyncExecutor.run(executor, STAMP):
                raw = await AsyncExecutor.run(executor, GET)
        except NoPermissionError:
            pass
    return read_version(raw)


class GuardedSyncExecutor(SyncExecutor):
    """A SyncExecutor whose first call checks the store's protocol (:func:`check`); ``stamp``: a
    writer (a client) stamps an absent key, a reader (an inspector) does not. Until a check
    passes, every call checks first (a refused or failed check is raised, the call not sent)."""

    def __init__(self, redis: Any, stamp: bool = True) -> None:
        super().__init__(redis)
        self.stamp = stamp
        self.protocol = 0  # the store's version, once checked

    def _checked(self) -> None:
        if not self.protocol:
            self.protocol = check(self, self.stamp)

    def run(self, call: Call[T]) -> T:
        self._checked()
        return super().run(call)

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        self._checked()
        return super().run_many(calls)

    def run_many_replicated(self, calls: Sequence[Call[Any]], replicas: int, timeout_ms: int) -> list[Any]:
        self._checked()
        return super().run_many_replicated(calls, replicas, timeout_ms)


class GuardedAsyncExecutor(AsyncExecutor):
    """Async twin of :class:`GuardedSyncExecutor`."""

    def __init__(self, redis: Any, stamp: bool = True) -> None:
        super().__init__(redis)
        self.stamp = stamp
        self.protocol = 0

    async def _checked(self) -> None:
        if not self.protocol:
            self.protocol = await acheck(self, self.stamp)

    async def run(self, call: Call[T]) -> T:
        if not self.protocol:
            await self._checked()
        return await super().run(call)

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if not self.protocol:
            await self._checked()
        return await super().run_many(calls)

    async def run_many_replicated(self, calls: Sequence[Call[Any]], replicas: int, timeout_ms: int) -> list[Any]:
        if not self.protocol:
            await self._checked()
        return await super().run_many_replicated(calls, replicas, timeout_ms)


class ReaderSyncExecutor(GuardedSyncExecutor):
    """A guarded executor that never stamps (the inspectors': operators' reads and actions)."""

    def __init__(self, redis: Any) -> None:
        super().__init__(redis, stamp=False)


class ReaderAsyncExecutor(GuardedAsyncExecutor):
    """Async twin of :class:`ReaderSyncExecutor`."""

    def __init__(self, redis: Any) -> None:
        super().__init__(redis, stamp=False)
