"""Issue 29, part one: defects where two features meet, each a path that ended, removed or
re-stored a task without the bookkeeping the main path does (lua/includes/exit.lua now does it
in one place). Each test failed before its fix; on fakeredis, redis-server and the cluster.

1. cancelling a running workflow parent tells its children;
2. a debounced enqueue that replaces a scheduled parent tells its children;
3. ``after=`` a parent that already failed archives the child in the same script (a resent call
   or a producer crash can no longer leave it waiting);
4. a keyed holder snoozed by ``RateLimited`` keeps its key (a later enqueue does not overtake it);
5. a resent keyed enqueue whose task is blocked is recognised as its own write;
6. an operator's delete, archive or cancel of a key's holder releases the key at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from helpers import serving, until

from asynqpy import Client, Inspector, RateLimited, ServeMux, Task, TaskState
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.workflows import plans as flows
from asynqpy.redisio.executor import run_plan

Q = "seam"


def _state(insp: Inspector, id: str) -> TaskState:
    return insp.task_info(Q, id).state


def _blocking_mux(started: set[str]) -> ServeMux:
    mux = ServeMux()

    @mux.handle("hold")
    async def hold(task: Task) -> None:
        started.add(task.id)
        await asyncio.sleep(30)

    @mux.handle("quick")
    async def quick(task: Task) -> None:
        started.add(task.id)

    return mux


def test_cancelling_a_running_parent_tells_its_children(backend: Any) -> None:
    started: set[str] = set()

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            parent = c.enqueue("hold", None, queue=Q, task_id="P")
            child = c.enqueue("quick", None, queue=Q, after=[parent], task_id="C")
            assert child.state is TaskState.WAITING
            async with serving(backend.new_async(), _blocking_mux(started), queues=[Q]):
                await until(lambda: "P" in started)
                insp.cancel("P", Q)
                # the outbox holds the parent's end at once; the propagator archives the child
                await until(lambda: _state(insp, "C") is TaskState.ARCHIVED, 10)
            info = insp.task_info(Q, "C")
            assert "cancelled: parent" in (info.last_error or "") and "C" not in started

    asyncio.run(main())


def test_a_debounce_that_replaces_a_parent_tells_its_children(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        p1 = c.enqueue("refresh", {"user": 1}, queue=Q, debounce=30, unique_key="refresh:1")
        child = c.enqueue("notify", None, queue=Q, after=[p1])
        c.enqueue("refresh", {"user": 1}, queue=Q, debounce=30, unique_key="refresh:1")
        k = queue_keys(Q)
        assert not backend.sync.hexists(k.tasks, p1.id)  # replaced
        assert backend.sync.xlen(k.outbox) == 1 and not backend.sync.hexists(k.children, p1.id)
        n, _ = run_plan(c._exec, flows.propagate(c.broker, Q))  # a propagator's pass
        assert n == 1
        assert _state(insp, child.id) is TaskState.ARCHIVED  # cancelled: its parent was deleted


def test_after_a_failed_parent_archives_the_child_in_one_step_even_when_sent_again(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        parent = c.enqueue("parent", None, queue=Q, task_id="P")
        insp.archive_task(Q, "P")
        info = c.enqueue("child", 0, queue=Q, after=[parent])
        assert info.state is TaskState.ARCHIVED and _state(insp, info.id) is TaskState.ARCHIVED
        assert "parent seam/P was archived" in (insp.task_info(Q, info.id).last_error or "")
        # the producer "dies" right after the store: no second step is needed any more
        p = c._prepare("child", 1, {"queue": Q, "after": [parent], "task_id": "C1"})
        plan = flows.enqueue_after(c.broker, p)
        calls = plan.send(c._exec.run_many(next(plan)))  # register_child, then enqueue_after ...
        first = c._exec.run_many(calls)
        plan.close()  # ... and nothing after it
        assert first == [TaskState.ARCHIVED] and _state(insp, "C1") is TaskState.ARCHIVED
        # the same call sent again (a lost reply) writes nothing and says archived, not pending
        again = c._exec.run_many(calls)
        assert again == [TaskState.ARCHIVED] and _state(insp, "C1") is TaskState.ARCHIVED
        assert backend.sync.zcard(queue_keys(Q).waiting) == 0


def test_a_snoozed_keyed_holder_keeps_its_turn(backend: Any) -> None:
    ran: list[str] = []
    limited: set[str] = set()
    mux = ServeMux()

    @mux.handle("step")
    async def step(task: Task) -> None:
        if task.payload == "A" and "A" not in limited:
            limited.add("A")
            raise RateLimited(0.5)
        ran.append(task.payload)

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            c.enqueue("step", "A", queue=Q, key="k", task_id="A")
            async with serving(backend.new_async(), mux, queues=[Q]):
                await until(lambda: _state(insp, "A") is TaskState.SCHEDULED)
                b = c.enqueue("step", "B", queue=Q, key="k", task_id="B")  # A still holds the key
                assert b.state is TaskState.BLOCKED
                c.enqueue("step", "C", queue=Q, key="k", task_id="C")
                await until(lambda: len(ran) == 3, 15)
        assert ran == ["A", "B", "C"]

    asyncio.run(main())


def test_a_resent_keyed_enqueue_of_a_blocked_task_is_its_own_write(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("job", 1, queue=Q, key="order:42", task_id="A")
        p = c._prepare("job", 2, {"queue": Q, "key": "order:42", "task_id": "B"})
        call = c.broker.enqueue_keyed(Q, p.id, p.msg, p.data)
        assert c._exec.run_many([call]) == [TaskState.BLOCKED]
        assert c._exec.run_many([call]) == [TaskState.BLOCKED]  # sent again: no conflict, nothing written
        assert _state(insp, "B") is TaskState.BLOCKED
        assert backend.sync.lrange(queue_keys(Q).key_list("order:42"), 0, -1) == [b"B"]


def test_an_operators_delete_archive_or_cancel_of_a_holder_releases_its_key(backend: Any) -> None:
    started: set[str] = set()

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            for verb in ("delete", "archive"):
                h = c.enqueue("quick", None, queue=Q, key=verb, task_id=f"{verb}-H")
                b = c.enqueue("quick", None, queue=Q, key=verb, task_id=f"{verb}-B")
                assert h.state is TaskState.PENDING and b.state is TaskState.BLOCKED
                getattr(insp, f"{verb}_task")(Q, f"{verb}-H")  # the pending holder
                assert _state(insp, f"{verb}-B") is TaskState.PENDING  # at once, no janitor sweep
                assert backend.sync.hget(queue_keys(Q).keyheld, verb) == f"{verb}-B".encode()
            c.enqueue("hold", None, queue=Q, key="run", task_id="R")
            c.enqueue("quick", None, queue=Q, key="run", task_id="RB")
            async with serving(backend.new_async(), _blocking_mux(started), queues=[Q], reconcile_interval=0):
                await until(lambda: "R" in started)
                t0 = time.monotonic()
                insp.cancel("R", Q)  # the running holder
                await until(lambda: "RB" in started, 10)
                assert time.monotonic() - t0 < 10

    asyncio.run(main())
