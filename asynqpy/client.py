"""Client and AsyncClient: put tasks on queues (now, later, uniquely, in batches).

Both share :class:`_ClientCore`, which validates options and builds the broker calls; the two
classes differ only in running those calls synchronously or with ``await``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from . import options as opts
from .broker import Broker, Call
from .clock import Clock
from .connection import async_client, sync_client
from .errors import InvalidArgumentError
from .executor import AsyncExecutor, SyncExecutor
from .task import TaskInfo, TaskState

BatchItem = Any  # (type, payload) or (type, payload, {option: value})


class _ClientCore:
    def __init__(self, max_payload_bytes: int, clock: Clock | None) -> None:
        self.broker = Broker(clock)
        self.max_payload_bytes = max_payload_bytes
        self._registered: set[str] = set()

    def _prepare(self, task_type: str, payload: Any, kwargs: dict[str, Any]) -> opts.Prepared:
        kwargs.setdefault("max_payload_bytes", self.max_payload_bytes)
        kwargs.setdefault("now", self.broker.clock.local_ms() / 1000)
        return opts.prepare(task_type, payload, **kwargs)

    def _calls(self, prepared: Sequence[opts.Prepared]) -> tuple[list[Call[Any]], int]:
        """Broker calls for prepared tasks, preceded by one queue registration if any is new."""
        new = sorted({p.queue for p in prepared} - self._registered)
        calls: list[Call[Any]] = [self.broker.register_queues(new)] if new else []
        for p in prepared:
            if p.delay_ms > 0:
                calls.append(self.broker.schedule(p.queue, p.id, p.msg, p.delay_ms, p.unique_ttl))
            else:
                calls.append(self.broker.enqueue(p.queue, p.id, p.msg, p.unique_ttl))
        return calls, len(calls) - len(prepared)

    def _split_batch(self, items: Iterable[BatchItem], common: dict[str, Any]) -> list[opts.Prepared]:
        out = []
        for item in items:
            if not isinstance(item, (tuple, list)) or not 1 <= len(item) <= 3:
                raise InvalidArgumentError("batch items are (type, payload) or (type, payload, options)")
            kwargs = dict(common)
            if len(item) == 3:
                kwargs.update(item[2])
            out.append(self._prepare(item[0], item[1] if len(item) > 1 else None, kwargs))
        return out

    def _info(self, p: opts.Prepared, reply: int) -> TaskInfo:
        state = TaskState.SCHEDULED if p.delay_ms > 0 else TaskState.PENDING
        due = reply if p.delay_ms > 0 else 0
        return TaskInfo.from_message(p.id, p.queue, state, p.msg, due)

    def _results(
        self, prepared: list[opts.Prepared], replies: list[Any], skip: int, return_exceptions: bool
    ) -> list[Any]:
        if skip and isinstance(replies[0], Exception):
            raise replies[0]
        self._registered.update(p.queue for p in prepared)
        out: list[Any] = []
        for p, r in zip(prepared, replies[skip:]):
            if isinstance(r, Exception):
                if not return_exceptions:
                    raise r
                out.append(r)
            else:
                out.append(self._info(p, r))
        return out


_ENQUEUE_DOC = """Enqueue a task; returns its :class:`TaskInfo`.

        ``payload``: bytes or any msgpack-serializable value. Options (keyword-only):
        ``queue`` ["default"]; ``max_retry`` [25]; ``timeout`` seconds per attempt (default: the
        server's default timeout; None = no limit); ``deadline`` (datetime or Unix seconds);
        ``process_at`` (datetime or Unix seconds) or ``process_in`` (seconds/timedelta) to schedule;
        ``unique`` (seconds/timedelta: reject duplicates of queue+type+payload for that long);
        ``task_id`` (default: a random UUID); ``retention`` (seconds to keep the completed task
        and its result); ``retry_delay`` (seconds between retries, overriding the server's policy).

        Raises InvalidArgumentError / PayloadError for bad input, DuplicateTaskError for a
        duplicate unique task, TaskIdConflictError when a live task has ``task_id``."""


class Client(_ClientCore):
    """Enqueues tasks (synchronous). ``redis``: a URL (default ``$ASYNQPY_REDIS_URL`` or
    redis://localhost:6379/0; ``redis+cluster://h:p,...`` for a cluster) or a redis-py client."""

    def __init__(self, redis: Any = None, *, max_payload_bytes: int = 1 << 20, clock: Clock | None = None) -> None:
        super().__init__(max_payload_bytes, clock)
        self.redis = sync_client(redis)
        self._owns = redis is None or isinstance(redis, str)
        self._exec = SyncExecutor(self.redis)

    def enqueue(self, task_type: str, payload: Any = None, **options: Any) -> TaskInfo:
        p = self._prepare(task_type, payload, options)
        calls, skip = self._calls([p])
        replies = self._exec.run_many(calls) if skip else [_run_or_exc(self._exec, calls[0])]
        return self._results([p], replies, skip, False)[0]  # type: ignore[no-any-return]

    enqueue.__doc__ = _ENQUEUE_DOC

    def enqueue_many(
        self, items: Iterable[BatchItem], *, return_exceptions: bool = False, **options: Any
    ) -> list[Any]:
        """Enqueue many tasks in one pipelined round trip. ``items``: (type, payload) or
        (type, payload, {option: value}) tuples; ``options`` apply to all. Every item is validated
        before anything is sent. Each task is stored atomically; a failing item (duplicate, id
        conflict) does not stop the others: with ``return_exceptions`` its exception takes its
        place in the returned list, else the first one is raised after all were attempted."""
        prepared = self._split_batch(items, options)
        calls, skip = self._calls(prepared)
        return self._results(prepared, self._exec.run_many(calls), skip, return_exceptions)

    def pause(self, queue: str) -> bool:
        """Pause a queue (workers stop taking its tasks). False if it was already paused."""
        return self._exec.run(self.broker.pause(queue))

    def unpause(self, queue: str) -> bool:
        """Unpause a queue. False if it was not paused."""
        return self._exec.run(self.broker.unpause(queue))

    def close(self) -> None:
        if self._owns:
            self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_ClientCore):
    """The asyncio twin of :class:`Client`: same methods, awaitable."""

    def __init__(self, redis: Any = None, *, max_payload_bytes: int = 1 << 20, clock: Clock | None = None) -> None:
        super().__init__(max_payload_bytes, clock)
        self.redis = async_client(redis)
        self._owns = redis is None or isinstance(redis, str)
        self._exec = AsyncExecutor(self.redis)

    async def enqueue(self, task_type: str, payload: Any = None, **options: Any) -> TaskInfo:
        p = self._prepare(task_type, payload, options)
        calls, skip = self._calls([p])
        replies = await self._exec.run_many(calls) if skip else [await _arun_or_exc(self._exec, calls[0])]
        return self._results([p], replies, skip, False)[0]  # type: ignore[no-any-return]

    enqueue.__doc__ = _ENQUEUE_DOC

    async def enqueue_many(
        self, items: Iterable[BatchItem], *, return_exceptions: bool = False, **options: Any
    ) -> list[Any]:
        """See :meth:`Client.enqueue_many`."""
        prepared = self._split_batch(items, options)
        calls, skip = self._calls(prepared)
        return self._results(prepared, await self._exec.run_many(calls), skip, return_exceptions)

    async def pause(self, queue: str) -> bool:
        """See :meth:`Client.pause`."""
        return await self._exec.run(self.broker.pause(queue))

    async def unpause(self, queue: str) -> bool:
        """See :meth:`Client.unpause`."""
        return await self._exec.run(self.broker.unpause(queue))

    async def close(self) -> None:
        if self._owns:
            await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _run_or_exc(ex: SyncExecutor, call: Call[Any]) -> Any:
    try:
        return ex.run(call)
    except Exception as exc:  # noqa: BLE001 - re-raised by _results
        return exc


async def _arun_or_exc(ex: AsyncExecutor, call: Call[Any]) -> Any:
    try:
        return await ex.run(call)
    except Exception as exc:  # noqa: BLE001 - re-raised by _results
        return exc
