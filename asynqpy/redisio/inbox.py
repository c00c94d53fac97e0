"""Inboxes: how a client waits for task outcomes without polling (``Client.result``, ``call``).

A client has one inbox per queue it waits on: a Redis list in the queue's slot that the scripts
finishing its tasks push outcomes to (see :mod:`asynqpy.core.results.plans`). One blocking pop serves
every waiter of the inbox, so a thousand concurrent calls on one queue hold one connection for the
wait. The pop goes out pipelined with an ``LPOP key 1000`` behind it: Redis runs the LPOP the
moment the BLPOP returns, so one round trip takes every outcome waiting.

Every :data:`~asynqpy.core.results.plans.RECHECK` seconds of silence (and after a lost connection) the
inbox looks at the tasks it waits for in one pipelined round trip, which catches a deleted
task, an outcome lost to a crash between a finishing script and a late waiter's notification, or
data lost by a Redis restart: a waiter gets its outcome, an error, or its timeout, never a hang.

:class:`AsyncInbox` serves asyncio waiters (one background task pops); :class:`SyncInbox`
serves threads (the first waiting thread pops for all, the others wait on a condition).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core.model.errors import AsynqpyError
from ..core.results.plans import RECHECK, Outcome, Progress, Waiting, check_call, new_inbox_id
from ..core.spine.broker import Broker
from ..core.spine.keys import queue_keys
from .connection import REDIS_ERRORS, read_timeout
from .executor import AsyncExecutor, SyncExecutor

log = logging.getLogger("asynqpy.client")

DRAIN = 1000
"""Most outcomes taken from an inbox per round trip after a pop."""
MAX_BACKOFF = 2.0
INBOX_TTL_MS = 600_000
"""An inbox expires this long after its last push (as the finishing scripts set it)."""


ProgressCallback = Callable[[Any], Any]


def _log_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("an on_progress callback failed", exc_info=fut.exception())
def _dispatch(reports: list[Progress], callbacks: dict[str, list[ProgressCallback]]) -> None:
    for rep in reports:
        for cb in callbacks.get(rep.id, []):
            try:
                ret = cb(rep.value)
                if asyncio.iscoroutine(ret):
                    asyncio.ensure_future(ret).add_done_callback(_log_failure)
            except Exception:
                log.exception("an on_progress callback failed for task %s", rep.id)


class _InboxCore:
    """What both drivers share: the inbox's names, its waiters, and turning replies into outcomes."""

    def __init__(self, redis: Any, executor: SyncExecutor | AsyncExecutor, broker: Broker, queue: str,
                 recheck: float = RECHECK) -> None:
        self.redis = redis
        self.exec = executor
        self.callbacks: dict[str, list[ProgressCallback]] = {}
        self.broker = broker
        self.queue = queue
        self.id = new_inbox_id()
        self.key = queue_keys(queue).inbox(self.id)
        self.waiting = Waiting(queue)
        self.recheck = recheck
        # a blocking pop must end before the client's socket timeout would abort it
        self.block_limit = max(0.05, min(recheck, read_timeout(redis) - 0.5))
        self.next_check = time.monotonic() + recheck
        self._own_state()

    def _own_state(self) -> None:
        """The driver's own attributes (its waiters' futures, or its lock)."""

    def _add(self, id: str, late: bool, on_progress: ProgressCallback | None) -> None:
        """Register a waiter of ``id`` (and its progress callback)."""
        self.waiting.add(id, late)
        if on_progress is not None:
            self.callbacks.setdefault(id, []).append(on_progress)

    def _drop(self, id: str, started: bool) -> None:
        """A waiter of ``id`` is gone: its outcome too once it was the last."""
        if self.waiting.remove(id, started):
            self.waiting.outcomes.pop(id, None)

    def _pop(self, deadline: float | None) -> Any:
        """The pop's pipeline: a blocking pop of the inbox (until ``deadline``, the next recheck, or
        the socket's limit) with an ``LPOP key DRAIN`` behind it; to execute."""
        pipe = self.redis.pipeline(transaction=False)
        return pipe.blpop([self.key], timeout=self._pop_timeout(deadline)).lpop(self.key, DRAIN)

    def _popped(self, replies: list[Any]) -> bool:
        """Record what the pop's pipeline took; whether it took anything. The LPOP's too when the
        blocking pop timed out: a pipeline is not atomic, so an outcome pushed between the two
        (Redis ran another client's commands as the BLPOP's timeout ended) is the LPOP's, and was
        lost (its waiter then read the task as not found, or waited out its timeout)."""
        popped, more = replies
        if popped:
            self._take(popped[1])
        self._take(more)
        return bool(popped) or bool(more)

    def _rechecked(self, ids: list[str], replies: list[Any], more: Any) -> None:
        """Record a recheck's replies and the outcomes pushed before it; the next recheck's time."""
        self._checked(ids, replies)
        self._take(more)
        self.waiting.settle()
        self.next_check = time.monotonic() + self.recheck

    def _take(self, popped: Any) -> None:
        """Record outcomes popped from the inbox (one value, a list, or None)."""
        if popped is None:
            return
        for data in popped if isinstance(popped, list) else [popped]:
            self.waiting.deliver(data)

    def _report(self, callbacks: dict[str, list[ProgressCallback]]) -> None:
        """Hand the progress reports taken so far to the callbacks of their waiters (what a
        callback raises is logged: it must not stop the inbox)."""
        reports, self.waiting.progress = self.waiting.progress, []
        _dispatch(reports, callbacks)


    def _check_calls(self) -> tuple[list[str], list[Any]]:
        ids = self.waiting.checkable()  # not a waiter whose enqueue/watch is still on its way
        return ids, [check_call(self.broker, self.queue, id, self.id) for id in ids]

    def _checked(self, ids: list[str], replies: list[Any]) -> None:
        for id, reply in zip(ids, replies):
            if not isinstance(reply, Exception):
                self.waiting.checked(id, reply)

    def _pop_timeout(self, deadline: float | None) -> float:
        now = time.monotonic()
        wait = min(self.block_limit, max(0.0, self.next_check - now))
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - now))
        return max(0.01, wait)




class AsyncInbox(_InboxCore):
    """An asyncio client's inbox on one queue."""

    exec: AsyncExecutor

    def _own_state(self) -> None:
        self.futures: dict[str, list[asyncio.Future[Outcome | BaseException]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def expect(self, id: str, late: bool,
               on_progress: ProgressCallback | None = None) -> asyncio.Future[Outcome | BaseException]:
        """Register a waiter for ``id`` (before its task can finish: before the enqueue, or before
        the watch call) and start popping. ``on_progress`` gets each progress report pushed."""
        fut: asyncio.Future[Outcome | BaseException] = asyncio.get_running_loop().create_future()
        self._add(id, late, on_progress)
        self.futures.setdefault(id, []).append(fut)
        if self._task is None or self._task.done():
            self.next_check = time.monotonic() + self.recheck
            self._task = asyncio.create_task(self._run(), name=f"asynqpy-inbox-{self.queue}")
        return fut

    def started(self, id: str) -> None:
        """The start of a waiter of ``id`` (its enqueue, or its watch call) was acknowledged by
        Redis: rechecks may look at the task from now on (not before: it may not be stored yet)."""
        self.waiting.started(id)

    def forget(self, id: str, fut: asyncio.Future[Outcome | BaseException], started: bool = True) -> None:
        """A waiter is done (answered, timed out or cancelled); ``started=False`` for one whose
        start failed or was never acknowledged."""
        futs = self.futures.get(id)
        if futs and fut in futs:
            futs.remove(fut)
            if not futs:
                del self.futures[id]
                self.callbacks.pop(id, None)
            self._drop(id, started)

    async def wait(self, id: str, fut: asyncio.Future[Outcome | BaseException], timeout: float | None) -> Any:
        """The result of task ``id`` (see :meth:`Outcome.value`); TimeoutError after ``timeout``."""
        try:
            got = await asyncio.wait_for(asyncio.shield(fut), timeout)
        finally:
            self.forget(id, fut)
        if isinstance(got, BaseException):
            raise got
        return got.value()

    def _resolve(self) -> None:
        for id, got in list(self.waiting.outcomes.items()):
            for fut in self.futures.get(id, []):
                if not fut.done():
                    fut.set_result(got)
            del self.waiting.outcomes[id]

    async def _run(self) -> None:
        backoff = 0.05
        while self.futures and not self._closing:
            try:
                if self._popped(await self._pop(None).execute()):
                    self._report(self.callbacks)
                    self._resolve()
                if time.monotonic() >= self.next_check:
                    await self._recheck()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except REDIS_ERRORS as exc:
                log.debug("waiting on inbox %s failed: %s; retrying in %.2fs", self.key, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                self.next_check = time.monotonic()  # look at the tasks once Redis answers again
            self._resolve()

    async def _recheck(self) -> None:
        ids, calls = self._check_calls()
        replies = await self.exec.run_many(calls) if calls else []
        more = await self.redis.lpop(self.key, DRAIN) if calls else None  # outcomes pushed before the look
        self._rechecked(ids, replies, more)

    async def close(self) -> None:
        """Stop popping. The pop is ended by a push of an empty entry (ignored), not by cancelling
        it: redis-py can swallow a cancellation that arrives as a blocking command starts, and
        the pop would then hold the close up for its whole timeout."""
        self._closing = True
        for futs in self.futures.values():
            for fut in futs:
                if not fut.done():
                    fut.set_result(AsynqpyError(f"the client was closed while waiting on queue {self.queue}"))
        task = self._task
        if task is None or task.done():
            return
        try:
            await self.exec.redis.pipeline(transaction=False).lpush(self.key, b"").pexpire(
                self.key, INBOX_TTL_MS).execute()
        except REDIS_ERRORS:
            pass
        done, _ = await asyncio.wait([task], timeout=1.0)
        if not done:
            task.cancel()


class SyncInbox(_InboxCore):
    """A thread-safe inbox on one queue for the sync client: the first waiting thread pops for
    every waiter, the others wait on a condition (one connection for the wait, not one per
    thread)."""

    exec: SyncExecutor

    def _own_state(self) -> None:
        self._cond = threading.Condition()
        self._popping = False

    def wait(self, id: str, timeout: float | None, late: bool, start: Callable[[], Any] | None = None,
             on_progress: ProgressCallback | None = None) -> Any:
        """Wait for task ``id``'s outcome. ``start`` (the enqueue, or the watch call, which may
        :meth:`offer` the outcome at once) runs once the waiter is registered. Returns the
        result; raises TaskFailedError, TaskNotFoundError, TimeoutError, or what ``start``
        raised. ``on_progress`` gets each progress report pushed (called in whichever waiting
        thread pops the inbox)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._add(id, late, on_progress)
        started = False
        try:
            if start is not None:
                start()
            with self._cond:
                self.waiting.started(id)  # acknowledged: rechecks may look at the task now
                started = True
            return self._await(id, deadline).value()
        finally:
            with self._cond:
                if on_progress is not None:
                    self.callbacks[id].remove(on_progress)
                    if not self.callbacks[id]:
                        del self.callbacks[id]
                self._drop(id, started)

    def offer(self, id: str, got: Outcome | BaseException) -> None:
        """Record an outcome found without the inbox (the watch call saw the task finished)."""
        with self._cond:
            self.waiting.outcomes[id] = got
            self._cond.notify_all()

    def _await(self, id: str, deadline: float | None) -> Outcome:
        while True:
            with self._cond:
                while True:
                    got = self.waiting.outcomes.get(id)
                    if got is not None:
                        if isinstance(got, BaseException):
                            raise got
                        return got
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"no outcome for task {id} (queue {self.queue}) within the timeout")
                    if not self._popping:
                        self._popping = True
                        break
                    self._cond.wait(remaining)
            try:
                self._pop_once(deadline)
            finally:
                with self._cond:
                    self._popping = False
                    self._cond.notify_all()

    def _pop_once(self, deadline: float | None) -> None:
        try:
            replies = self._pop(deadline).execute()
            with self._cond:
                self._popped(replies)
                reports, self.waiting.progress = self.waiting.progress, []
                callbacks = {rep.id: list(self.callbacks.get(rep.id, [])) for rep in reports}
                check = time.monotonic() >= self.next_check
                ids, calls = self._check_calls() if check else ([], [])
            _dispatch(reports, callbacks)  # outside the lock: a callback may take its time
            if check:
                replies = self.exec.run_many(calls) if calls else []
                more = self.redis.lpop(self.key, DRAIN) if calls else None
                with self._cond:
                    self._rechecked(ids, replies, more)
        except REDIS_ERRORS as exc:
            log.debug("waiting on inbox %s failed: %s", self.key, exc)
            time.sleep(min(0.2, max(0.0, (deadline or float("inf")) - time.monotonic())))
            self.next_check = time.monotonic()
