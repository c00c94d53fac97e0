"""Priorities within a queue (``priority=0..9``, 5 by default, higher first): strict order, FIFO
within a priority, through every way a task becomes pending (enqueue, batches, due scheduled and
retry tasks, the shutdown requeue, run now, edits), listings and counts, deletes and archives of
prioritized pending tasks. On fakeredis, redis-server and the cluster."""

from __future__ import annotations

from typing import Any

import pytest

from asynqpy import Client, Inspector, InvalidArgumentError, QueueNotEmptyError, TaskState
from asynqpy.core.model.codec import Message, decode, encode
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

Q = "pq"


def _take_all(backend: Any, batch: int = 3) -> list[Any]:
    """Dequeue everything pending, ``batch`` at a time, as a worker does: the payloads in order."""
    ex, b = SyncExecutor(backend.sync), Broker()
    out: list[Any] = []
    for _ in range(1000):
        got = ex.run(b.dequeue(Q, batch, 30_000, "tok00001"))
        if not got.tasks:
            return out
        out += [decode(m).payload for _, m in got.tasks]
    raise AssertionError("the queue never emptied")


def test_strict_order_and_fifo_within_a_priority(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        prios = [5, 9, 0, 5, 7, 9, 0, 3, 5]
        for i, p in enumerate(prios):
            c.enqueue("t", i, queue=Q, priority=p)
        c.enqueue_many([("t", 100, {"priority": 9}), ("t", 101), ("t", 102, {"priority": 1})], queue=Q)
        c.enqueue_many([("t", 200 + i) for i in range(3)], queue=Q, priority=8)
        expected = [1, 5, 100, 200, 201, 202, 4, 0, 3, 8, 101, 7, 102, 2, 6]
        listed = insp.list_tasks(Q, TaskState.PENDING, page_size=100)
        assert [t.payload for t in listed] == expected  # the listing shows the order workers take
        assert [t.priority for t in listed][:3] == [9, 9, 9] and listed[-1].priority == 0
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING, page=2, page_size=4)] == expected[4:8]
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING, page=4, page_size=4)] == expected[12:]
        assert insp.queue_info(Q).pending == len(expected)
        assert _take_all(backend) == expected


def test_priority_survives_schedule_retry_requeue_and_run_now(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("t", "plain-1", queue=Q)
        s = c.enqueue("t", "high-scheduled", queue=Q, priority=9, process_in=3600)
        c.enqueue("t", "plain-2", queue=Q)
        insp.run_task(Q, s.id)  # run now: at the back of priority 9 (ahead of every default task)
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)][0] == "high-scheduled"
        # a due scheduled task of priority 0 goes behind the default ones (the forwarder's move)
        low = c.enqueue("t", "low-due", queue=Q, priority=0, process_in=3600)
        q = queue_keys(Q)
        backend.sync.zadd(q.scheduled, {low.id: 1})
        ex, b = SyncExecutor(backend.sync), Broker()
        assert ex.run(b.forward(Q, 100))[0] == 1
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)] == [
            "high-scheduled", "plain-1", "plain-2", "low-due"]
        # leased, then put back at shutdown: the front of its own priority
        got = ex.run(b.dequeue(Q, 1, 30_000, "tok00001"))
        (id, _), = got.tasks
        c.enqueue("t", "high-later", queue=Q, priority=9)
        assert ex.run(b.requeue(Q, id, "tok00001")) == 1
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)][:2] == ["high-scheduled", "high-later"]
        assert _take_all(backend, batch=2) == ["high-scheduled", "high-later", "plain-1", "plain-2", "low-due"]


def test_edit_delete_archive_and_drop_prioritized_pending_tasks(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        a = c.enqueue("t", "a", queue=Q, priority=2)
        c.enqueue("t", "b", queue=Q)
        d = c.enqueue("t", "d", queue=Q, priority=7)
        info = insp.edit_task(Q, a.id, priority=9)
        assert info.priority == 9 and info.state is TaskState.PENDING
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)] == ["a", "d", "b"]
        insp.edit_task(Q, a.id, priority=5)  # the default: into the list, at its back
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)] == ["d", "b", "a"]
        with pytest.raises(InvalidArgumentError, match="priority must be an int from 0"):
            insp.edit_task(Q, a.id, priority=10)
        insp.archive_task(Q, d.id)
        assert insp.task_info(Q, d.id).state is TaskState.ARCHIVED and insp.queue_info(Q).pending == 2
        insp.run_task(Q, d.id)  # back from the archive, with its priority
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)] == ["d", "b", "a"]
        insp.delete_task(Q, d.id)
        assert backend.sync.zcard(queue_keys(Q).prio) == 0
        assert insp.delete_all(Q, TaskState.PENDING) == 2
        c.enqueue("t", "e", queue=Q, priority=1)
        assert insp.delete_all(Q, TaskState.PENDING) == 1
        c.enqueue("t", "f", queue=Q, priority=1)
        with pytest.raises(QueueNotEmptyError, match="holds 1 task"):
            insp.remove_queue(Q)  # a prioritized pending task counts
        insp.remove_queue(Q, force=True)
        assert not backend.sync.exists(queue_keys(Q).prio)


def test_bad_priorities_are_refused_and_nothing_queued_is_lost(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("t", "kept", queue=Q, priority=9)
        for bad in (-1, 10, 2.5, True, "9", None):
            with pytest.raises(InvalidArgumentError, match="priority must be an int from 0 .lowest. to 9"):
                c.enqueue("t", queue=Q, priority=bad)
        with pytest.raises(InvalidArgumentError, match="grouped task has no priority"):
            c.enqueue("t", queue=Q, priority=9, group="g")
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)] == ["kept"]


def test_lua_reads_the_priority_past_any_payload_and_a_signing_tag(backend: Any) -> None:
    """The scripts find a message's priority by skipping the fields before it (msgpack, without
    decoding): payloads of every msgpack type, nested deeply, a result, headers, a signed tag."""
    nested: Any = {"k": [1, -1, -200, 2**40, -(2**40), 1.5, None, True, False, b"\x00" * 300, "s" * 70_000]}
    for _ in range(40):
        nested = [nested, {"x": nested if _ < 2 else 0}]
    payloads = [None, 0, "x", b"y" * 70_000, nested, {i: str(i) for i in range(20)}, list(range(70_000))]
    with Client(backend.sync, signing_key=b"k" * 32) as c:
        for n, payload in enumerate(payloads):
            c.enqueue("t", payload, queue=Q, priority=n % 2 * 9, headers={"h": "v"}, task_id=f"x{n}")
    ex = SyncExecutor(backend.sync)
    order = [id for id, _ in ex.run(Broker().dequeue(Q, 100, 30_000, "tok00001")).tasks]
    assert order == ["x1", "x3", "x5", "x0", "x2", "x4", "x6"]
    # a message with a priority outside 0..9 (written by hand) counts as the default
    raw = encode(Message("t", "odd", priority=42))
    q = queue_keys(Q)
    backend.sync.hset(q.tasks, "odd", b"s" + raw)
    backend.sync.zadd(q.scheduled, {"odd": 1})
    c2 = Client(backend.sync)
    c2.enqueue("t", "plain", queue=Q)
    assert ex.run(Broker().forward(Q, 10))[0] == 1
    assert backend.sync.llen(q.pending) == 2 and backend.sync.zcard(q.prio) == 0
    c2.close()


def test_retry_front_puts_a_retry_ahead_of_the_backlog(backend: Any) -> None:
    """retry_front=True (hibiken/asynq#1079): a failed attempt's retry goes to the front of its
    priority when the forwarder moves it, not behind the tasks that waited meanwhile; a task
    without it goes to the back, as ever (the recoverer's retry of an expired lease goes the same
    way: one forward path). Bad values and tasks it does not apply to are refused."""
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        front = c.enqueue("t", "front", queue=Q, retry_front=True, retry_delay=0)
        c.enqueue("t", "back", queue=Q, retry_delay=0)
        for i in range(3):
            c.enqueue("t", f"w{i}", queue=Q)
        assert decode(backend.sync.hget(queue_keys(Q).tasks, front.id)[1:]).retry_front
        got = ex.run(b.dequeue(Q, 2, 30_000, "tok00001"))
        assert [decode(m).payload for _, m in got.tasks] == ["front", "back"]
        for id, m in got.tasks:  # both fail: a retry due at once
            msg = decode(m)
            assert ex.run(b.retry(Q, id, "tok00001", msg.with_(retried=1, last_error="boom"), 0)) > 0
        assert ex.run(b.forward(Q, 100))[0] == 2
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)] == ["front", "w0", "w1", "w2", "back"]
        assert _take_all(backend) == ["front", "w0", "w1", "w2", "back"]
        for bad, match in (({"retry_front": 1}, "retry_front must be True or False"),
                           ({"retry_front": True, "group": "g"}, "retry_front applies to a task that runs"),
                           ({"retry_front": True, "workers": ["w1"]}, "retry_front applies to a task that runs")):
            with pytest.raises(InvalidArgumentError, match=match):
                c.enqueue("t", "x", queue=Q, **bad)
        assert insp.queue_info(Q).pending == 0  # nothing queued by the refused calls
