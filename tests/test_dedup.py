"""Deduplication by a key of the caller's choosing (``unique_key``) and idempotent publishing
(``on_conflict="return"``). On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from asynqpy import (
    AsyncClient,
    Client,
    DuplicateTaskError,
    Inspector,
    InvalidArgumentError,
    TaskIdConflictError,
    TaskNotFoundError,
    TaskState,
    ThrottledError,
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
    from asynqpy.core.model.codec import Message

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


def test_unique_duplicate_names_its_holder_and_on_conflict_returns_it(backend: Any) -> None:
    with Client(backend.sync) as c:
        first = c.enqueue("charge", 1, queue=Q, unique_key="order:7", unique=300)
        with pytest.raises(DuplicateTaskError) as err:
            c.enqueue("charge", 2, queue=Q, unique_key="order:7")
        assert err.value.holder == first.id and 0 < err.value.expires_in <= 300
        got = c.enqueue("charge", 2, queue=Q, unique_key="order:7", on_conflict="return")
        assert (got.id, got.payload) == (first.id, 1)  # the live task, unchanged


def test_throttle_drops_duplicates_for_a_window_even_after_the_task_finished(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        first = c.enqueue("sync", {"user": 1}, queue=Q, unique_key="sync:1", throttle=30)
        with pytest.raises(ThrottledError) as err:
            c.enqueue("sync", {"user": 1}, queue=Q, unique_key="sync:1", throttle=30)
        assert isinstance(err.value, DuplicateTaskError)  # one except clause catches both
        assert err.value.holder == first.id and 29 < err.value.expires_in <= 30
        with pytest.raises(ThrottledError):  # on_conflict="return" does not apply: the holder may be long gone
            c.enqueue("sync", {"user": 1}, queue=Q, unique_key="sync:1", throttle=30, on_conflict="return")
        assert insp.task_info(Q, first.id).state is TaskState.PENDING
        insp.delete_task(Q, first.id)  # finished or deleted: the window still holds
        with pytest.raises(ThrottledError):
            c.enqueue("sync", {"user": 1}, queue=Q, unique_key="sync:1", throttle=30)
        c.enqueue("sync", {"user": 2}, queue=Q, throttle=30)  # no unique_key: type + payload is the key
        with pytest.raises(ThrottledError):
            c.enqueue("sync", {"user": 2}, queue=Q, throttle=30)
        backend.sync.pexpire(f"asynqpy:{{{Q}}}:u:" + _digest("sync:1"), 1)  # the window runs out
        deadline = time.monotonic() + 5
        while backend.sync.exists(f"asynqpy:{{{Q}}}:u:" + _digest("sync:1")) and time.monotonic() < deadline:
            time.sleep(0.01)
        again = c.enqueue("sync", {"user": 1}, queue=Q, unique_key="sync:1", throttle=30)
        assert again.state is TaskState.PENDING and again.id != first.id
        assert insp.queue_info(Q).pending == 2  # nothing queued was lost by the refusals
        for bad, match in ((0.5, "throttle must be at least 1 second"), (-1, "throttle"),
                           ("x", "throttle")):
            with pytest.raises(InvalidArgumentError, match=match):
                c.enqueue("sync", queue=Q, throttle=bad)
        with pytest.raises(InvalidArgumentError, match="not several"):
            c.enqueue("sync", queue=Q, throttle=5, unique=5)


def test_debounce_replaces_the_waiting_task_and_pushes_its_due_time(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        a = c.enqueue("reindex", {"v": 1}, queue=Q, unique_key="doc:9", debounce=60)
        assert a.state is TaskState.SCHEDULED and a.replaced == ""
        b = c.enqueue("reindex", {"v": 2}, queue=Q, unique_key="doc:9", debounce=60)
        assert b.replaced == a.id and b.next_process_at is not None and a.next_process_at is not None
        assert b.next_process_at >= a.next_process_at
        with pytest.raises(TaskNotFoundError):
            insp.task_info(Q, a.id)  # the replaced task is gone
        assert [t.payload for t in insp.list_tasks(Q, "scheduled")] == [{"v": 2}]
        insp.run_task(Q, b.id)  # it no longer waits (as if it had started): a new one goes beside it
        c_ = c.enqueue("reindex", {"v": 3}, queue=Q, unique_key="doc:9", debounce=60)
        assert c_.replaced == ""
        assert insp.task_info(Q, b.id).state is TaskState.PENDING
        d = c.enqueue("reindex", {"v": 4}, queue=Q, unique_key="doc:9", debounce=60)
        assert d.replaced == c_.id  # the newest holds the key
        info = insp.queue_info(Q)
        assert (info.pending, info.scheduled) == (1, 1)
        e = c.enqueue("reindex", {"v": 5}, queue=Q, debounce=60)  # keyed by type + payload
        assert c.enqueue("reindex", {"v": 5}, queue=Q, debounce=60).replaced == e.id
        with pytest.raises(InvalidArgumentError, match="debounce delays the task itself"):
            c.enqueue("reindex", queue=Q, debounce=5, process_in=3)
        with pytest.raises(InvalidArgumentError, match="debounce"):
            c.enqueue("reindex", queue=Q, debounce=0)
