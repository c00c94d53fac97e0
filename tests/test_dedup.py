"""Deduplication by a key of the caller's choosing (``unique_key``) and idempotent publishing
(``on_conflict="return"``). On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asynqpy import (
    AsyncClient,
    Client,
    DuplicateTaskError,
    Inspector,
    InvalidArgumentError,
    TaskIdConflictError,
    TaskState,
)

Q = "dq"


def test_unique_by_a_key_of_the_callers_choosing(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        first = c.enqueue("charge", {"amount": 5}, queue=Q, unique_key="order:42")
        with pytest.raises(DuplicateTaskError):
            c.enqueue("refund", {"other": "payload"}, queue=Q, unique_key="order:42")  # same key: refused
        c.enqueue("charge", {"amount": 5}, queue=Q, unique_key="order:43")  # another key: fine
        c.enqueue("charge", {"amount": 5}, queue=Q)  # no key, not unique
        assert insp.queue_info(Q).pending == 3
        insp.delete_task(Q, first.id)  # its key is released with it
        again = c.enqueue("refund", None, queue=Q, unique_key="order:42", unique=60)
        assert again.state is TaskState.PENDING
        ttl = backend.sync.ttl(f"asynqpy:{{{Q}}}:u:" + _digest("order:42"))
        assert 0 < ttl <= 60
        for bad in ("", 5, "x" * 1025):
            with pytest.raises(InvalidArgumentError, match="unique_key must be a non-empty string"):
                c.enqueue("t", queue=Q, unique_key=bad)


def _digest(key: str) -> str:
    from asynqpy.core.codec import Message

    return Message("t", unique=True, unique_key=key).lock_digest()


def test_on_conflict_return_gives_the_live_task(backend: Any) -> None:
    async def main() -> None:
        with Client(backend.sync) as c:
            first = c.enqueue("t", 1, queue=Q, task_id="job-1", process_in=600)
            with pytest.raises(TaskIdConflictError):
                c.enqueue("t", 2, queue=Q, task_id="job-1")
            same = c.enqueue("t", 2, queue=Q, task_id="job-1", on_conflict="return")
            assert (same.id, same.payload, same.state) == ("job-1", 1, TaskState.SCHEDULED)  # the one queued
            assert same.next_process_at == first.next_process_at
            with pytest.raises(InvalidArgumentError, match="on_conflict must be 'raise' or 'return'"):
                c.enqueue("t", queue=Q, task_id="job-1", on_conflict="ignore")
            with pytest.raises(InvalidArgumentError, match="needs a task_id"):
                c.enqueue("t", queue=Q, on_conflict="return")
        async with AsyncClient(backend.new_async()) as ac:
            got = await ac.enqueue("t", 3, queue=Q, task_id="job-1", on_conflict="return")
            assert got.payload == 1
            fresh = await ac.enqueue("t", 4, queue=Q, task_id="job-2", on_conflict="return")
            assert fresh.state is TaskState.PENDING and fresh.payload == 4

    asyncio.run(main())
