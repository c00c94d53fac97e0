"""Aggregation groups: tasks enqueued with ``group=`` wait (aggregating) until a server's
aggregator turns each due group into one task — by grace period, max delay or max size — exactly
once however many servers race; the Inspector and operators see and act on them. On fakeredis,
redis-server and the cluster."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import Client, Inspector, InvalidArgumentError, ServeMux, Task, TaskState, TaskStateError
from asynqpy.core.spine.keys import queue_keys
from asynqpy.worker.aggregator import Aggregation, AggregatorParams
from asynqpy.worker.context import Context

Q = "gq"


def _digest(group: str, tasks: list[Task]) -> tuple[str, Any]:
    return "digest", {"group": group, "ids": [t.id for t in tasks], "items": [t.payload for t in tasks]}


def _mux(got: list[Any]) -> ServeMux:
    mux = ServeMux()

    @mux.handle("digest")
    async def digest(task: Task) -> None:
        got.append(task.payload)

    return mux


def test_grouped_tasks_wait_and_are_aggregated_by_grace(backend: Any) -> None:
    got: list[Any] = []

    async def main() -> None:
        with Client(backend.sync) as c:
            infos = [c.enqueue("mail", i, group="user:1", queue=Q) for i in range(5)]
            c.enqueue("mail", 99, group="user:2", queue=Q, task_id="lonely")
        assert {i.state for i in infos} == {TaskState.AGGREGATING} and infos[0].group == "user:1"
        with Inspector(backend.sync) as insp:
            info = insp.queue_info(Q)
            assert (info.aggregating, info.groups, info.size, info.pending) == (6, 2, 6, 0)
            assert [(g.group, g.size) for g in insp.groups(Q)] == [("user:1", 5), ("user:2", 1)]
            listed = insp.list_tasks(Q, "aggregating", group="user:1")
            assert [t.payload for t in listed] == [0, 1, 2, 3, 4]  # the order they joined in
            assert insp.task_info(Q, "lonely").state is TaskState.AGGREGATING
        async with serving(backend.new_async(), _mux(got), queues={Q: 1}, group_aggregator=_digest,
                           group_grace_period=0.3):
            await until(lambda: len(got) == 2, 10)
        by_group = {g["group"]: g for g in got}
        assert by_group["user:1"]["items"] == [0, 1, 2, 3, 4] and by_group["user:2"]["ids"] == ["lonely"]
        with Inspector(backend.sync) as insp:
            info = insp.queue_info(Q)
            assert (info.aggregating, info.groups, info.size) == (0, 0, 0)
            assert insp.groups(Q) == []
            kinds = [e.event for e in insp.events(Q)]
            assert kinds.count("aggregated") == 6
        keys = {k.decode() for k in backend.sync.keys(f"*{{{Q}}}:g*")}
        assert keys == set(), keys  # the groups' zsets are gone with their tasks

    asyncio.run(main())


def test_max_size_and_max_delay(backend: Any) -> None:
    """max size: the oldest max-size tasks go at once (the rest wait); max delay: a group whose
    tasks keep coming (grace never reached) is aggregated once its oldest task waited that long."""
    got: list[Any] = []

    async def main() -> None:
        with Client(backend.sync) as c:
            c.enqueue_many([("mail", i) for i in range(7)], group="big", queue=Q)
        async with serving(backend.new_async(), _mux(got), queues={Q: 1}, group_aggregator=_digest,
                           group_grace_period=60, group_max_size=3, group_max_delay=1.0):
            await until(lambda: len(got) == 2, 10)  # two full batches of 3 at once
            assert [g["items"] for g in got] == [[0, 1, 2], [3, 4, 5]]
            with Client(backend.sync) as c:
                for i in range(10, 16):  # keeps the group busy: grace (60 s) is never reached
                    c.enqueue("mail", i, group="big", queue=Q)
                    await asyncio.sleep(0.15)
            await until(lambda: any(6 in g["items"] for g in got), 10)  # max delay took the old one

    asyncio.run(main())


def test_racing_aggregators_aggregate_each_task_once(backend: Any) -> None:
    """Three servers' aggregators race over 40 groups: every task is in exactly one aggregate."""
    with Client(backend.sync) as c:
        c.enqueue_many([("mail", f"{g}-{i}", {"group": f"g{g}"}) for g in range(40) for i in range(5)], queue=Q)
    made: list[Any] = []

    async def main() -> None:
        loops = []
        for _ in range(3):
            ctx = Context(backend.new_async(), _clock(), None)
            loops.append(Aggregation(ctx, AggregatorParams((Q,), lambda g, ts: ("digest", [t.payload for t in ts]),
                                                           0.05, None, 1000), None))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        await asyncio.gather(*(lp.once() for lp in loops))
        made.extend(lp.aggregated for lp in loops)

    asyncio.run(main())
    with Inspector(backend.sync) as insp:
        pending = insp.list_tasks(Q, "pending", page_size=1000)
    items = [x for t in pending for x in t.payload]
    assert sum(made) == 40 == len(pending)
    assert sorted(items) == sorted(f"{g}-{i}" for g in range(40) for i in range(5))  # each once


def _clock() -> Any:
    from asynqpy import Clock

    return Clock()


def test_a_failing_aggregator_keeps_the_group(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    def broken(group: str, tasks: list[Task]) -> Any:
        raise RuntimeError("aggregator bug")

    async def main() -> None:
        with Client(backend.sync) as c:
            c.enqueue("mail", 1, group="g", queue=Q)
        async with serving(backend.new_async(), ServeMux(), queues={Q: 1}, group_aggregator=broken,
                           group_grace_period=0.1):
            await until(lambda: "aggregator bug" in caplog.text, 10)
        with Inspector(backend.sync) as insp:
            assert insp.queue_info(Q).aggregating == 1  # nothing lost

    asyncio.run(main())


def test_bad_input(backend: Any) -> None:
    with Client(backend.sync) as c:
        for kwargs, message in [
            ({"group": "g", "process_in": 5}, "give group or process_at/process_in, not both"),
            ({"group": "a b"}, "invalid group name 'a b'"),
            ({"group": ""}, "invalid group name ''"),
        ]:
            with pytest.raises(InvalidArgumentError, match=re.escape(message)):
                c.enqueue("t", 1, queue=Q, **kwargs)
        with pytest.raises(InvalidArgumentError, match="has no result of its own"):
            c.call("t", 1, queue=Q, group="g", timeout=1)
    for kwargs, message in [
        ({"group_aggregator": 5}, "group_aggregator must be a function"),
        ({"group_aggregator": _digest, "group_grace_period": 0}, "group_grace_period must be a number of seconds > 0"),
        ({"group_aggregator": _digest, "group_max_size": 0}, "group_max_size must be an int from 1 to 1000"),
    ]:
        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            from asynqpy import Server

            Server(backend.sync, **kwargs)
    with Inspector(backend.sync) as insp:
        with pytest.raises(InvalidArgumentError, match="give the group"):
            insp.list_tasks(Q, "aggregating")


def test_operator_actions_on_grouped_tasks(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("t", 1, group="g", queue=Q, task_id="a")
        c.enqueue("t", 2, group="g", queue=Q, task_id="b", unique=600)
        c.enqueue("t", 3, group="g", queue=Q, task_id="c")
        c.enqueue("t", 4, group="h", queue=Q, task_id="d")
        insp.run_task(Q, "a")  # out of the group, to run alone
        assert insp.task_info(Q, "a").state is TaskState.PENDING
        insp.archive_task(Q, "c")
        assert insp.task_info(Q, "c").state is TaskState.ARCHIVED
        insp.delete_task(Q, "b")  # its uniqueness lock goes with it
        c.enqueue("t", 2, group="g", queue=Q, unique=600)
        assert [(g.group, g.size) for g in insp.groups(Q)] == [("g", 1), ("h", 1)]
        with pytest.raises(TaskStateError, match="edit applies to pending, scheduled and retry"):
            insp.edit_task(Q, "d", payload=5)
        assert insp.delete_all(Q, "aggregating") == 2
        info = insp.queue_info(Q)
        assert (info.aggregating, info.groups) == (0, 0) and insp.groups(Q) == []
        c.enqueue("t", 5, group="x", queue=Q)
        insp.remove_queue(Q, force=True)
        assert Q not in insp.queues()
        assert not backend.sync.exists(queue_keys(Q).aggregating, queue_keys(Q).groups)


@pytest.mark.real
def test_group_commands(redis_url: str) -> None:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    def cli(*args: str) -> tuple[int, str, str]:
        res = CliRunner().invoke(main, [*args, "--redis-url", redis_url])
        return res.exit_code, res.stdout, res.stderr

    with Client(redis_url) as c:
        for i in range(3):
            c.enqueue("mail", i, group="user:7", queue=Q, task_id=f"m{i}")
    code, out, _ = cli("queue", "groups", Q)
    assert code == 0 and "user:7" in out and " 3 " in out
    code, out, _ = cli("queue", "inspect", Q)
    assert code == 0 and "aggregating 3 in 1 group(s)" in out
    code, out, _ = cli("task", "ls", "-q", Q, "--state", "aggregating", "--group", "user:7")
    assert code == 0 and "m0" in out and "m2" in out and "aggregating 1-3 of 3" in out
    code, _, err = cli("task", "ls", "-q", Q, "--state", "aggregating")
    assert code == 2 and err.startswith("asynqpy: error: aggregating tasks are listed per group: give --group")
    code, out, _ = cli("enqueue", "mail", "--queue", Q, "--group", "user:8", "--payload", "1")
    assert code == 0 and out.endswith(f"to {Q}: aggregating\n"), out
    code, _, err = cli("enqueue", "mail", "--queue", Q, "--group", "user:8", "--in", "5")
    assert code == 2 and "give --group or --at/--in, not both" in err, err
    code, out, _ = cli("task", "run", "-q", Q, "--id", "m0")
    assert code == 0
    code, out, _ = cli("queue", "groups", Q, "--json")
    assert code == 0 and '"size": 2' in out
