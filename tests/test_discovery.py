"""Queues served by pattern (``queues={"tenant-*": 1}``): a server serves every known queue that
matches, present and future, without a restart, and drops one that is removed (worker/discovery.py,
ServedQueues in worker/queues.py). On fakeredis, redis-server and the Cluster."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import serving, until

from asynqpy import AsyncClient, Client, Inspector, ServeMux, Server, Task
from asynqpy.core.model.errors import InvalidArgumentError
from asynqpy.worker.queues import Cadence, ServedQueues

ROOT = Path(__file__).resolve().parent.parent


def test_a_pattern_serves_the_known_queues_that_match() -> None:
    s = ServedQueues({"critical": 5, "t-*": 1, "t-vip-?": 3})
    assert s.current == {"critical": 5} and s.version == 0
    assert s.replace(["t-a", "t-vip-1", "other", "critical"]) == (["t-a", "t-vip-1"], [])
    # the first pattern given that matches gives the weight; a name given as such wins
    assert s.current == {"critical": 5, "t-a": 1, "t-vip-1": 1} and s.version == 1
    assert s.replace(["t-a", "t-vip-1", "critical"]) == ([], []) and s.version == 1  # nothing changed
    assert s.replace(["t-b"]) == (["t-b"], ["t-a", "t-vip-1"])  # a queue no longer known is dropped
    assert s.current == {"critical": 5, "t-b": 1} and s.version == 2  # (a name given stays)
    assert ServedQueues({"x?": 2}).weight_of("xy") == 2 and ServedQueues({"x?": 2}).weight_of("xyz") is None


def test_a_chore_schedule_follows_the_served_queues() -> None:
    c = Cadence(["a", "b"], base=1.0, rate=0.5, start=0.0)
    assert sorted(c.due(0.0)) == ["a", "b"]
    c.at("a", 5.0)
    c.idle("b", 0.0)
    c.resize(["a", "c"], now=2.0)  # b dropped, c new: due at once and cold
    assert c.due(2.0) == ["c"] and "c" in c.cold and "b" not in c.cold
    assert c.due(100.0) == ["a"]  # (b's old schedule is forgotten)


def test_bad_patterns_are_refused() -> None:
    for bad in ("t-{*}", "t *", "*" * 129):
        with pytest.raises(InvalidArgumentError, match="invalid queue pattern"):
            Server(queues={bad: 1})
    with pytest.raises(InvalidArgumentError, match="invalid queue pattern"):
        Server(queues=["ok", "bad{*"])
    # (the CLI's --queues: one line, exit code 2, in tests/test_cli.py)


def test_queues_that_appear_are_served_and_removed_ones_dropped(backend: Any) -> None:
    ran: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.queue)

    def listed(insp: Inspector) -> set[str]:
        return {q for s in insp.servers() for q in s.queues}

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            c.enqueue("t", None, queue="t-before")
            c.enqueue("t", None, queue="other")  # not served: matches no pattern
            async with serving(backend.new_async(), mux, queues={"t-*": 1, "fixed": 2}):
                await until(lambda: "t-before" in ran)
                client = AsyncClient(backend.new_async())
                await client.enqueue("t", None, queue="t-new")  # a queue no one has used yet
                await until(lambda: "t-new" in ran, 5)
                await client.enqueue("t", None, queue="t-later", process_in=0.2)  # the chores follow too
                await until(lambda: "t-later" in ran, 5)
                await until(lambda: {"t-before", "t-new", "t-later", "fixed"} <= listed(insp), 5)
                await until(lambda: insp.queue_info("t-new").processed_total == 1)
                insp.remove_queue("t-new")
                await until(lambda: "t-new" not in listed(insp), 5)  # dropped from the served queues
                await client.close()
            assert "other" not in ran and sorted(ran) == ["t-before", "t-later", "t-new"]
            assert insp.queue_info("other").pending == 1  # nothing lost: it waits for its server

    asyncio.run(main())


def test_a_server_whose_patterns_match_nothing_yet_waits_idle(backend: Any) -> None:
    """No queue at start: every loop waits (the janitor's sweep once spun on an empty queue set,
    blocking the event loop), and the first matching queue is served."""
    ran: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.queue)

    async def main() -> None:
        async with serving(backend.new_async(), mux, queues={"p-*": 1}):
            await asyncio.sleep(0.7)
            client = AsyncClient(backend.new_async())
            await client.enqueue("t", None, queue="p-first")
            await until(lambda: ran == ["p-first"], 5)
            await client.close()

    asyncio.run(main())  # (with the spin, the loop never ran again: the test's time bound failed it)


@pytest.mark.real
def test_the_docs_example_runs(redis_url: str) -> None:
    """docs/queues.md, "Queues by pattern": its example, as written (a subprocess, a scratch db)."""
    text = (ROOT / "docs" / "queues.md").read_text()
    section = text[text.index("## Queues by pattern"):text.index("## Weights, and serving many queues")]
    code = re.findall(r"^```python\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert len(code) == 1
    url = redis_url.rsplit("/", 1)[0] + "/13"
    redis.Redis.from_url(url).flushdb()
    res = subprocess.run([sys.executable, "-c", f"URL = {url!r}\n{code[0]}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_removed_queue_used_again_by_long_lived_producers_is_known_and_served(backend: Any) -> None:
    """Issue 42 (defect 3): a Client (and an AsyncClient) used for the application's lifetime
    enqueues, by each of its paths (the lone enqueue, one with options, enqueue_many, a task
    waiting on a parent), into a queue an operator removed since it last used it: the queue is
    known again (``Inspector.queues()``) and a server finding queues by pattern runs the task.
    Before, the client remembered the queues it had registered and never added the name again:
    the task stayed pending for good."""
    ran: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    def listed(insp: Inspector) -> set[str]:
        return {q for s in insp.servers() for q in s.queues}

    async def produce(c: Client, ac: AsyncClient, round: str) -> None:
        c.enqueue("t", f"lone {round}", queue="r-lone")
        c.enqueue("t", f"options {round}", queue="r-options", max_retry=1)
        c.enqueue_many([("t", f"many {round}")], queue="r-many")
        await ac.enqueue("t", f"async {round}", queue="r-async")
        await ac.enqueue_many([("t", f"async many {round}")], queue="r-amany")
        parent = c.enqueue("t", f"parent {round}", queue="r-parent")
        c.enqueue("t", f"after {round}", queue="r-after", after=[parent])

    names = ["r-lone", "r-options", "r-many", "r-async", "r-amany", "r-parent", "r-after"]

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            ac = AsyncClient(backend.new_async())
            async with serving(backend.new_async(), mux, queues={"r-*": 1}, heartbeat_interval=0.2):
                await produce(c, ac, "first")
                await until(lambda: len(ran) == 7 and set(names) <= listed(insp), 10)
                await until(lambda: all(insp.queue_info(q).processed_total == 1 for q in names))
                for q in names:
                    insp.remove_queue(q)
                await until(lambda: not set(names) & listed(insp), 10)  # no longer served
                await produce(c, ac, "again")
                await until(lambda: len(ran) == 14, 10)
                assert set(names) <= set(insp.queues())
            await ac.close()

    asyncio.run(main())


def test_a_fetcher_restarted_while_idle_loses_no_wake_token(backend: Any, monkeypatch: Any) -> None:
    """A queue dropped from the served set restarts the fetcher (Processor.serve) while it is
    blocked in its idle wait; a task enqueued just after into that queue (which brings it back)
    runs at once, not at the scan. Before, the restart cancelled the wait where it could not be
    unblocked (fakeredis, a client other than redis-py's Redis): its BLPOP went on in the server
    (fakeredis: until its timeout), the one blocked on that queue's wake list, popped the task's
    token and lost it with the cancelled reply, and the worker, of more than 4 queues and so
    fetching by token, left the task to the scan (here, minutes away). (The flaky case of
    ``test_a_removed_queue_used_again_by_long_lived_producers_is_known_and_served``.)"""
    monkeypatch.setattr("asynqpy.worker.queues.SCAN_PER_S", 0.01)  # a queue scanned every 100 s
    ran: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    names = [f"w-{i}" for i in range(6)]  # more than FEW_QUEUES: the worker fetches by wake token

    def listed(insp: Inspector) -> set[str]:
        return {q for s in insp.servers() for q in s.queues}

    async def main() -> None:
        with Inspector(backend.sync) as insp:
            client = AsyncClient(backend.new_async())
            for q in names:
                await client.enqueue("t", q, queue=q)
            async with serving(backend.new_async(), mux, queues={"w-*": 1}, idle_timeout=8, heartbeat_interval=0.2):
                await until(lambda: sorted(ran) == names and set(names) <= listed(insp), 5)
                await until(lambda: insp.queue_info("w-5").processed_total == 1)
                insp.remove_queue("w-5")  # the fetcher, blocked in its wait (up to 8 s), is restarted
                await until(lambda: "w-5" not in listed(insp), 5)
                await client.enqueue("t", "again", queue="w-5")  # only the old wait blocked on its wake list
                await until(lambda: "again" in ran, 3)
            await client.close()

    asyncio.run(main())


def test_discovery_compares_the_next_size_with_what_its_own_read_saw() -> None:
    """A queue removed between a look's SCARD and the SMEMBERS it asked for, then used again: the
    next look sees the size change and serves it again. Before, the size kept was the SCARD's
    (the set's size before the removal), the same as after the queue came back: no look read the
    set again until the rescan (30 s), and the queue's tasks waited for it."""
    import fakeredis

    from asynqpy import FakeClock
    from asynqpy.core.spine.keys import ALL_QUEUES
    from asynqpy.worker.context import Context
    from asynqpy.worker.discovery import Discovery

    async def main() -> None:
        r = fakeredis.FakeAsyncRedis()
        await r.sadd(ALL_QUEUES, "d-a", "d-b")
        ctx = Context(r, FakeClock())
        served: list[list[str]] = []

        async def serve(queues: Any) -> None:
            served.append(sorted(queues))

        discovery = Discovery(ctx, ServedQueues({"d-*": 1}), serve)
        run = ctx.exec.run

        async def removed_in_between(call: Any) -> Any:
            if call.command[:1] == ("SMEMBERS",):
                await r.srem(ALL_QUEUES, "d-b")  # (Inspector.remove_queue)
            return await run(call)

        ctx.exec.run = removed_in_between  # type: ignore[method-assign]
        await discovery.look()
        ctx.exec.run = run  # type: ignore[method-assign]
        assert served == [["d-a"]]
        await r.sadd(ALL_QUEUES, "d-b")  # used again: the set has the size the SCARD said
        await discovery.look()
        assert served == [["d-a"], ["d-a", "d-b"]]
        await r.aclose()

    asyncio.run(main())
