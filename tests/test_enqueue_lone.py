"""Client.enqueue's lone path (client.py, ClientPlans._lone): the common call is sent without
driving the plan, as one quick script call (lua/enqueue_lone.lua) that stores what the plan's
enqueue stores and leaves a task to the plan's admission when a producer rule is set; it answers
what the plan answers; every other call still runs the plan."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import asdict, replace
from typing import Any

import fakeredis
import pytest

from asynqpy import AsyncClient, Client, Inspector, QueueFullError, TaskState
from asynqpy.core.model.codec import decode
from asynqpy.core.spine import tracing
from asynqpy.core.spine.broker import LONE_FULL
from asynqpy.core.spine.keys import queue_keys


def _comparable(info: Any) -> dict[str, Any]:
    d = asdict(info)
    for k in ("id", "payload", "enqueued_at"):
        d.pop(k)
    return d


def test_the_lone_path_answers_what_the_plan_answers_and_is_taken_only_for_the_common_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    with Client(r) as c:
        driven: list[Any] = []
        real_drive = c._drive
        monkeypatch.setattr(c, "_drive", lambda plan: driven.append(plan) or real_drive(plan))
        first = c.enqueue("t", 1, queue="q")  # a queue not seen yet: the plan registers it
        assert len(driven) == 1
        second = c.enqueue("t", 2, queue="q")  # the lone path
        assert len(driven) == 1
        assert second.state is TaskState.PENDING and second.payload == 2 and second.id != first.id
        assert _comparable(first) == _comparable(second)
        assert Inspector(r).task_info("q", second.id).payload == 2
        c.enqueue("t", 3, queue="q", max_retry=1)  # any other option: the plan
        c.enqueue("t", 4, queue="q", task_id="mine")
        c.enqueue("t", 5)  # the default queue, new: the plan
        assert len(driven) == 4
        c.enqueue("t", 6)  # now known
        assert len(driven) == 4
        monkeypatch.setattr(tracing, "current", object())  # tracing on: the plan (it opens a span)
        assert c._lone("t", 7, {"queue": "q"}) is None
        monkeypatch.setattr(tracing, "current", None)
        assert c._lone("t", 7, {"queue": 1}) is None  # not a str: the plan's validation speaks
        assert Inspector(r).queue_info("q").pending == 4


def test_the_async_lone_path_too() -> None:
    async def main() -> None:
        server = fakeredis.FakeServer()
        fake = fakeredis.FakeAsyncRedis(server=server)
        async with AsyncClient(fake) as c:
            a = await c.enqueue("t", 1, queue="q")
            b = await c.enqueue("t", 2, queue="q")
            assert c._lone("t", 3, {"queue": "q"}) is not None
            assert _comparable(a) == _comparable(b) and b.state is TaskState.PENDING
            answers = _spied(c)
            Inspector(fakeredis.FakeRedis(server=server)).set_queue_cap("q", 2, "reject")
            with pytest.raises(QueueFullError):  # the quick call answered 'full': the plan's enqueue refused it
                await c.enqueue("t", 4, queue="q")
            assert answers == [LONE_FULL] and "q" in c._ruled

    asyncio.run(main())


def test_the_quick_call_seals_the_message_as_enqueue_does() -> None:
    """Broker.enqueue_lone (the lone path's call, its keys bound once per queue) sends the message
    Broker.enqueue sends, with or without a signer (sealed the same way), with its own keys."""
    from asynqpy.core.model.codec import Message, encode
    from asynqpy.core.security.signing import Signer
    from asynqpy.core.spine.broker import Broker
    from asynqpy.core.spine.keys import queue_keys

    msg = Message(type="t", payload=[1, "x"], enqueued_at_ms=5)
    q = queue_keys("q")
    for signer in (None, Signer(b"0" * 32)):
        b = Broker(signer=signer)
        want, got = b.enqueue("q", "id1", msg, 0, encode(msg), False), b.enqueue_lone("q")("id1", encode(msg))
        assert got.script == "enqueue_lone" and got.args == ("id1", want.args[1])
        assert set(got.keys) == {q.tasks, q.wake, q.pending, q.prio, q.tq, q.tr, q.tn, q.ta, q.events, q.conf}
        assert got.parse(1) == 1 and got.parse(b"full") == LONE_FULL


def _spied(c: Any) -> list[Any]:
    """The answers of the client's quick calls (Broker.enqueue_lone's), in order."""
    answers: list[Any] = []
    bind = c.broker.enqueue_lone

    def spy(queue: str) -> Any:
        bound = bind(queue)

        def call(id: str, data: bytes) -> Any:
            made = bound(id, data)
            return replace(made, parse=lambda r: answers.append(made.parse(r)) or answers[-1])

        return call

    c.broker.enqueue_lone = spy
    c._registers.clear()  # (each queue's quick call bound again, through the spy)
    return answers


def test_the_quick_call_stores_what_enqueue_stores(backend: Any) -> None:
    """A lone enqueue through enqueue_lone.lua leaves the task, its place in pending, its event and
    the stream's count as the plan's enqueue.lua leaves them (fakeredis, redis-server, Cluster)."""
    q = f"lone{uuid.uuid4().hex[:6]}"
    k = queue_keys(q)
    with Client(backend.sync) as c:
        answers = _spied(c)
        a = c.enqueue("t", {"x": 1}, queue=q)  # (a queue new to the client: the plan)
        b = c.enqueue("t", {"x": 1}, queue=q)  # the quick call
        assert answers == [1] and b.state is TaskState.PENDING
        r = backend.sync
        sa, sb = r.hget(k.tasks, a.id), r.hget(k.tasks, b.id)
        assert sa[:1] == sb[:1] == b"p"
        ma, mb = decode(sa[1:]), decode(sb[1:])
        assert replace(ma, enqueued_at_ms=0) == replace(mb, enqueued_at_ms=0)
        assert r.lrange(k.pending, 0, -1) == [b.id.encode(), a.id.encode()]  # (LPUSH: a is taken first)
        entries = [f for _, f in r.xrange(k.events)]
        assert [e[b"id"] for e in entries] == [a.id.encode(), b.id.encode()]
        assert entries[0].keys() == entries[1].keys() and entries[1][b"e"] == b"enqueued" and entries[1][b"type"] == b"t"
        assert int(r.hget(k.conf, "kept")) == 2
        assert r.llen(k.wake) == 1
        assert Inspector(r).task_info(q, b.id).payload == {"x": 1}


def test_a_producer_rule_sends_the_lone_task_through_the_admission(backend: Any) -> None:
    """With a cap set, the quick call writes nothing and answers 'full': the task goes through
    enqueue.lua, which refuses it (nothing stored) or drops the oldest; the client keeps to the
    plan for that queue a while, and takes the quick call again once the cap is gone. A cap of a
    tenant leaves the tasks without a tenant on the quick call."""
    q = f"lonecap{uuid.uuid4().hex[:6]}"
    k = queue_keys(q)
    r = backend.sync
    with Client(r) as c, Inspector(r) as insp:
        answers = _spied(c)
        first = c.enqueue("t", 1, queue=q)
        insp.set_tenant(q, "acme", max_pending=1)  # a tenant's cap: not this task's rule
        c.enqueue("t", 2, queue=q)
        assert answers == [1] and r.hlen(k.tasks) == 2
        insp.set_queue_cap(q, 2, "reject")
        with pytest.raises(QueueFullError):
            c.enqueue("t", 3, queue=q)
        assert answers == [1, LONE_FULL] and r.hlen(k.tasks) == 2 and r.llen(k.pending) == 2
        assert q in c._ruled
        with pytest.raises(QueueFullError):  # (ruled: the plan at once, one round trip)
            c.enqueue("t", 4, queue=q)
        assert answers == [1, LONE_FULL]
        insp.set_queue_cap(q, 2, "drop_oldest")
        c._ruled.clear()
        kept = c.enqueue("t", 5, queue=q)
        assert answers == [1, LONE_FULL, LONE_FULL]
        assert r.hget(k.tasks, first.id)[:1] == b"x" and r.hget(k.tasks, kept.id)[:1] == b"p"
        insp.set_queue_cap(q, None)
        c._ruled.clear()
        c.enqueue("t", 6, queue=q)
        assert answers == [1, LONE_FULL, LONE_FULL, 1] and r.llen(k.pending) == 3


def test_the_quick_call_sent_again_writes_once(backend: Any) -> None:
    """The same call run twice (its first reply lost, after the write) answers 1 and writes
    nothing more: one task, one event; run again after a worker took the task, it leaves the
    worker's lease alone."""
    from asynqpy.core.model.codec import Message, encode
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    q = f"loneagain{uuid.uuid4().hex[:6]}"
    k = queue_keys(q)
    r = backend.sync
    b, x = Broker(), SyncExecutor(r)
    call = b.enqueue_lone(q)("gen", encode(Message("t", 1, enqueued_at_ms=1)))
    assert x.run(call) == 1 and x.run(call) == 1
    assert r.lrange(k.pending, 0, -1) == [b"gen"] and r.xlen(k.events) == 1
    x.run(b.dequeue(q, 1, 30_000, "tok00001"))
    assert x.run(call) == 1
    assert r.hget(k.tasks, "gen")[:9] == b"atok00001" and r.llen(k.pending) == 0 and r.xlen(k.events) == 1


def test_a_task_info_like_its_template_is_the_one_from_message_gives() -> None:
    """TaskInfo.like (the lone path's answer) gives what from_message gives for each template a
    client's options make, with its own dicts and lists (not shared between answers)."""
    from asynqpy.core.model.codec import Message
    from asynqpy.core.model.task import TaskInfo

    templates = [Message(type=""), Message(type="", max_retry=2, timeout_ms=1500, deadline_ms=9_000_000,
                                            retention_ms=60_000, headers={"h": "1"}, priority=8, tenant="acme",
                                            workers=["w1"], min_version=3, group="")]
    for template in templates:
        make = TaskInfo.like("q", template)
        for state in (TaskState.PENDING, TaskState.ACTIVE):
            got = make("id9", "t", {"p": 1}, 1_700_000_000_123, state)
            msg = Message(**{**{f: getattr(template, f) for f in template.__dataclass_fields__},
                             "type": "t", "payload": {"p": 1}, "enqueued_at_ms": 1_700_000_000_123})
            assert got == TaskInfo.from_message("id9", "q", state, msg, 0)
        a, b = make("a", "t", 1, 5, TaskState.PENDING), make("b", "t", 1, 5, TaskState.PENDING)
        a.headers["x"] = "y"
        a.runs["w"] = "running"
        assert "x" not in b.headers and b.runs == {}
        assert a.workers is None or a.workers is not b.workers
