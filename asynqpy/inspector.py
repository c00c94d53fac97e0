"""Inspector: read queues and tasks, and control queues (this issue's part: queue list, per-state
counts and counters, one task's info, pause/unpause). Every call is O(1) in Redis work."""

from __future__ import annotations

from typing import Any

from .broker import Broker, Call, QueueStats, id_arg
from .clock import Clock
from .codec import decode
from .connection import sync_client
from .errors import InvalidArgumentError, MalformedMessageError, QueueNotFoundError, TaskNotFoundError
from .executor import SyncExecutor
from .keys import queue_keys
from .task import TaskInfo, TaskState


class Inspector:
    """Synchronous inspection and control. ``redis``: URL or redis-py client (as for Client)."""

    def __init__(self, redis: Any = None, *, clock: Clock | None = None) -> None:
        self.redis = sync_client(redis)
        self._owns = redis is None or isinstance(redis, str)
        self.broker = Broker(clock)
        self._exec = SyncExecutor(self.redis)

    def queues(self) -> list[str]:
        """Names of every known queue, sorted."""
        return self._exec.run(self.broker.queues())

    def _known(self, queue: str) -> None:
        queue_keys(queue)
        if queue not in self.queues():
            raise QueueNotFoundError(f"queue {queue!r} not found")

    def stats(self, queue: str) -> QueueStats:
        """Counts per state, paused flag, processed/failed totals and today's (atomic snapshot)."""
        self._known(queue)
        return self._exec.run(self.broker.stats(queue))

    def all_stats(self) -> list[QueueStats]:
        """:meth:`stats` of every queue, in one pipelined round trip."""
        return [s for s in self._exec.run_many([self.broker.stats(q) for q in self.queues()])
                if not isinstance(s, Exception)]

    def task_info(self, queue: str, id: str) -> TaskInfo:
        """One task's info; raises TaskNotFoundError (MalformedMessageError for garbage data)."""
        q = queue_keys(queue)
        if not id:
            raise InvalidArgumentError("a task id is a non-empty string")
        raw = id_arg(id)
        value, sched, retry, done = self._exec.run_many([
            self.broker.get_task(queue, id),
            Call(lambda r: r, command=("ZSCORE", q.scheduled, raw)),
            Call(lambda r: r, command=("ZSCORE", q.retry, raw)),
            Call(lambda r: r, command=("ZSCORE", q.completed, raw)),
        ])
        if isinstance(value, Exception):
            raise value
        if value is None:
            raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        if value[:1] not in (b"p", b"a", b"s", b"r", b"x", b"c"):
            raise MalformedMessageError(f"task {id!r} in queue {queue!r} has no valid state")
        state = TaskState.from_code(value[:1].decode())
        msg = decode(value[9:] if state is TaskState.ACTIVE else value[1:])
        score = {TaskState.SCHEDULED: sched, TaskState.RETRY: retry}.get(state)
        return TaskInfo.from_message(id, queue, state, msg, int(float(score)) if score else 0)

    def pause(self, queue: str) -> bool:
        """Pause a queue; False if it already was."""
        self._known(queue)
        return self._exec.run(self.broker.pause(queue))

    def unpause(self, queue: str) -> bool:
        """Unpause a queue; False if it was not paused."""
        self._known(queue)
        return self._exec.run(self.broker.unpause(queue))

    def close(self) -> None:
        """Give the connection back to the pool; close the Redis client if this made it."""
        self._exec.close()
        if self._owns:
            self.redis.close()
