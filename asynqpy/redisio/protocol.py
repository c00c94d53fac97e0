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
from ..core.spine.twin import Steps, planned
from .executor import AsyncExecutor, SyncExecutor, _ExecutorPlans

T = TypeVar("T")


def _same(reply: Any) -> Any:
    return reply


GET = Call(_same, command=("GET", PROTOCOL))
STAMP = Call(_same, command=("SET", PROTOCOL, str(ABSENT_MEANS), "NX"))


def _check(executor: _ExecutorPlans, stamp: bool) -> Steps[int]:
    """The plan of the check (run by the executor's own ``run`` plan, never a guarded
    override's): the store's protocol version; ``stamp``: a writer stamps an absent key. Raises
    ProtocolVersionError, or the Redis error of the GET."""
    run = _ExecutorPlans.run.plan
    raw = yield from run(executor, GET)
    if raw is None and stamp:
        try:
            if not (yield from run(executor, STAMP)):  # another writer stamped it meanwhile
                raw = yield from run(executor, GET)
        except NoPermissionError:  # a role that may not write it: the next writer stamps it
            pass
    return read_version(raw)


def check(executor: SyncExecutor, stamp: bool) -> int:
    """The store's protocol version, read with ``executor`` (:func:`_check`)."""
    return executor._drive(_check(executor, stamp))


async def acheck(executor: AsyncExecutor, stamp: bool) -> int:
    """Async twin of :func:`check`."""
    return await executor._drive(_check(executor, stamp))


class _Guarded(_ExecutorPlans):
    """An executor whose first call checks the store's protocol (:func:`_check`); ``stamp``: a
    writer (a client) stamps an absent key, a reader (an inspector) does not. Until a check
    passes, every call checks first (a refused or failed check is raised, the call not sent);
    after it, a call costs one attribute test more. Written once: the sync and async executors
    below drive these plans."""

    stamp = True
    protocol = 0  # the store's version, once checked

    def _guard(self) -> Steps[None]:
        if not self.protocol:
            self.protocol = yield from _check(self, self.stamp)

    @planned
    def run(self, call: Call[T]) -> Steps[T]:
        yield from self._guard()
        return (yield from _ExecutorPlans.run.plan(self, call))

    @planned
    def run_many(self, calls: Sequence[Call[Any]]) -> Steps[list[Any]]:
        yield from self._guard()
        return (yield from _ExecutorPlans.run_many.plan(self, calls))

    @planned
    def run_many_replicated(self, calls: Sequence[Call[Any]], replicas: int, timeout_ms: int) -> Steps[list[Any]]:
        yield from self._guard()
        return (yield from _ExecutorPlans.run_many_replicated.plan(self, calls, replicas, timeout_ms))


class GuardedSyncExecutor(_Guarded, SyncExecutor):
    """A SyncExecutor checking the store's protocol first (:class:`_Guarded`)."""

    def _checked(self) -> bool:
        return bool(self.protocol)


class GuardedAsyncExecutor(_Guarded, AsyncExecutor):
    """Async twin of :class:`GuardedSyncExecutor`."""


class ReaderSyncExecutor(GuardedSyncExecutor):
    """A guarded executor that never stamps (the inspectors': operators' reads and actions)."""

    stamp = False


class ReaderAsyncExecutor(GuardedAsyncExecutor):
    """Async twin of :class:`ReaderSyncExecutor`."""

    stamp = False
