"""Client.enqueue's lone path (client.py, ClientPlans._lone): the common call is sent without
driving the plan, and answers what the plan answers; every other call still runs the plan."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import fakeredis
import pytest

from asynqpy import AsyncClient, Client, Inspector, TaskState
from asynqpy.core.spine import tracing


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
        async with AsyncClient(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())) as c:
            a = await c.enqueue("t", 1, queue="q")
            b = await c.enqueue("t", 2, queue="q")
            assert c._lone("t", 3, {"queue": "q"}) is not None
            assert _comparable(a) == _comparable(b) and b.state is TaskState.PENDING

    asyncio.run(main())


def test_the_bound_enqueue_is_the_brokers_enqueue() -> None:
    """Broker.enqueue_plain (the lone path's call, its keys bound once per queue) makes the call
    Broker.enqueue makes, with or without a signer (its message sealed the same way)."""
    from asynqpy.core.model.codec import Message, encode
    from asynqpy.core.security.signing import Signer
    from asynqpy.core.spine.broker import Broker

    msg = Message(type="t", payload=[1, "x"], enqueued_at_ms=5)
    for signer in (None, Signer(b"0" * 32)):
        b = Broker(signer=signer)
        bound = b.enqueue_plain("q")
        for check in (True, False):
            want, got = b.enqueue("q", "id1", msg, 0, encode(msg), check), bound("id1", encode(msg), check)
            assert (got.script, got.keys, got.args) == (want.script, want.keys, want.args)
            assert got.parse(1) == want.parse(1)


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
