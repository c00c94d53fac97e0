"""Keyed serial execution: ``enqueue(..., key=...)``: tasks of a queue sharing a key run one at a
time, in enqueue order, across workers; other keys are not held back; a retry keeps the key, a
final failure releases it; a holder removed by an operator is repaired; typed errors. On
fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import pytest
from helpers import serving, stats, until, wait_sync

from asynqpy import Client, Inspector, InvalidArgumentError, ServeMux, Task, TaskState, TaskStateError
from asynqpy.core.spine.keys import queue_keys

Q = "kq"


def _mux(runs: dict[str, list[tuple[int, float, float]]], fail_first: set[int] | None = None,
         fail_always: set[int] | None = None) -> ServeMux:
    mux = ServeMux()

    @mux.handle("step")
    async def step(task: Task) -> None:
        key, n, ms = task.payload["key"], task.payload["n"], task.payload.get("ms", 5)
        start = time.monotonic()
        await asyncio.sleep(ms / 1000)
        if fail_always and n in fail_always:
            raise RuntimeError("always")
        if fail_first and n in fail_first and task.retry_count == 0:
            raise RuntimeError("first time")
        runs[key].append((n, start, time.monotonic()))

    return mux


def _serial(runs: list[tuple[int, float, float]]) -> bool:
    return all(a[2] <= b[1] for a, b in zip(runs, runs[1:]))


def test_tasks_of_a_key_run_one_at_a_time_in_order_across_workers(backend: Any) -> None:
    runs: dict[str, list[tuple[int, float, float]]] = defaultdict(list)

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            infos = []
            for n in range(60):
                key = f"order:{n % 3}"
                infos.append(c.enqueue("step", {"key": key, "n": n, "ms": 40 if key == "order:0" else 5},
                                       queue=Q, key=key))
            assert [i.state for i in infos[:3]] == [TaskState.PENDING] * 3
            assert all(i.state is TaskState.BLOCKED for i in infos[3:])
            assert stats(backend, Q).pending == 3 and stats(backend, Q).blocked == 57
            assert len(insp.list_tasks(Q, TaskState.BLOCKED, 1, 100)) == 57
            async with serving(backend.new_async(), _mux(runs), queues=[Q], concurrency=10), \
                    serving(backend.new_async(), _mux(runs), queues=[Q], concurrency=10):
                await until(lambda: sum(len(r) for r in runs.values()) == 60, 20)
        for k in range(3):
            got = runs[f"order:{k}"]
            assert [n for n, _, _ in got] == list(range(k, 60, 3))  # enqueue order
            assert _serial(got), got  # never two at once
        # the slow key did not hold the others back
        assert runs["order:1"][-1][2] < runs["order:0"][-1][2] and runs["order:2"][-1][2] < runs["order:0"][-1][2]
        s = stats(backend, Q)
        assert s.blocked == 0 and s.pending == 0 and not backend.sync.hlen(queue_keys(Q).keyheld)

    asyncio.run(main())


def test_a_retry_keeps_the_key_and_a_final_failure_releases_it(backend: Any) -> None:
    runs: dict[str, list[tuple[int, float, float]]] = defaultdict(list)

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            for n in range(4):
                c.enqueue("step", {"key": "k", "n": n}, queue=Q, key="k", task_id=f"t{n}", retry_delay=0.2,
                          max_retry=0 if n == 2 else 3)
            async with serving(backend.new_async(), _mux(runs, fail_first={0}, fail_always={2}), queues=[Q]):
                await until(lambda: len(runs["k"]) == 3, 15)
                await until(lambda: insp.task_info(Q, "t2").state is TaskState.ARCHIVED)
            assert [n for n, _, _ in runs["k"]] == [0, 1, 3]  # t1 waited for t0's retry; t2's failure let t3 go
            assert _serial(runs["k"])
            with pytest.raises(TaskStateError, match="has a key"):
                insp.run_task(Q, "t2")  # running it would run it beside the key's next task
            assert insp.run_all(Q, TaskState.ARCHIVED) == 0 and insp.task_info(Q, "t2").state is TaskState.ARCHIVED

    asyncio.run(main())


def test_a_holder_removed_by_hand_is_repaired(backend: Any) -> None:
    runs: dict[str, list[tuple[int, float, float]]] = defaultdict(list)

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            c.enqueue("step", {"key": "k", "n": 0}, queue=Q, key="k", task_id="h")
            c.enqueue("step", {"key": "k", "n": 1}, queue=Q, key="k", task_id="b1")
            c.enqueue("step", {"key": "k", "n": 2}, queue=Q, key="k", task_id="b2")
            insp.delete_task(Q, "b1")  # a blocked task can be deleted
            k = queue_keys(Q)
            backend.sync.hdel(k.tasks, "h")  # the holder, removed by hand: the key is stale
            backend.sync.lrem(k.pending, 0, "h")
            assert insp.task_info(Q, "b2").state is TaskState.BLOCKED
            async with serving(backend.new_async(), _mux(runs), queues=[Q], reconcile_interval=0.2):
                await until(lambda: len(runs["k"]) == 1, 10)  # the janitor released the key to b2
            assert [n for n, _, _ in runs["k"]] == [2]
            # and an enqueue finding a stale holder takes the key at once
            c.enqueue("step", {"key": "z", "n": 0}, queue=Q, key="z", task_id="z0")
            backend.sync.hset(k.tasks, "z0", b"c" + backend.sync.hget(k.tasks, "z0")[1:])  # ended by hand
            backend.sync.lrem(k.pending, 0, "z0")
            assert c.enqueue("step", {"key": "z", "n": 1}, queue=Q, key="z").state is TaskState.PENDING

    asyncio.run(main())


def test_bad_keys_are_typed_errors_and_nothing_queued_is_lost(backend: Any) -> None:
    with Client(backend.sync) as c:
        c.enqueue("step", None, queue=Q, key="k")
        for bad in ("", 5, "x" * 2000):
            with pytest.raises(InvalidArgumentError):
                c.enqueue("step", None, queue=Q, key=bad)
        for extra in ({"group": "g"}, {"workers": ["w"]}, {"after": "x"}, {"unique": 60}, {"debounce": 5}):
            with pytest.raises(InvalidArgumentError):
                c.enqueue("step", None, queue=Q, key="k", **extra)
        got = c.enqueue_many([("step", i, {"key": "m"}) for i in range(3)], queue=Q)
        assert [i.state for i in got] == [TaskState.PENDING, TaskState.BLOCKED, TaskState.BLOCKED]
    s = stats(backend, Q)
    assert s.pending == 2 and s.blocked == 2


def test_removing_a_queue_with_keyed_and_waiting_tasks_leaves_no_key(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        for i in range(5):
            c.enqueue("step", i, queue=Q, key=f"k{i % 2}")
        parent = c.enqueue("step", 0, queue=Q)
        c.enqueue("step", 1, queue=Q, after=parent)
        insp.remove_queue(Q, force=True)
    assert [k for k in backend.sync.keys("*") if b"{kq}" in k] == []


def test_cli_enqueue_key(backend: Any) -> None:
    if backend.kind == "fake":
        return  # the CLI connects by URL
    from click.testing import CliRunner

    from asynqpy.cli.main import main as cli

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["enqueue", "step", "-q", Q, *args, "--redis-url", backend.url])

    assert "pending" in run("--key", "acct:1").output and "blocked" in run("--key", "acct:1").output
    assert "scheduled" in run("--key", "acct:1", "--in", "5").output
    res = run("--key", "acct:1", "--group", "g")
    assert res.exit_code == 2 and "--key" in res.output + (res.stderr or "")


def test_a_keyed_task_with_a_due_time_takes_its_turn_when_due(backend: Any) -> None:
    """process_in with key=: scheduled until due, then it takes its key (or queues behind the
    key's holder, here still running); "run now" is refused, an edit to "now" goes through the
    key too."""
    runs: dict[str, list[tuple[int, float, float]]] = defaultdict(list)

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            c.enqueue("step", {"key": "k", "n": 0, "ms": 800}, queue=Q, key="k", task_id="slow")
            later = c.enqueue("step", {"key": "k", "n": 1}, queue=Q, key="k", task_id="later", process_in=0.2)
            assert later.state is TaskState.SCHEDULED
            with pytest.raises(TaskStateError, match="has a key"):
                insp.run_task(Q, "later")
            free = c.enqueue("step", {"key": "f", "n": 2}, queue=Q, key="f", task_id="free", process_in=0.2)
            assert free.state is TaskState.SCHEDULED
            c.enqueue("step", {"key": "e", "n": 3}, queue=Q, key="e", task_id="edited", process_in=3600)
            insp.edit_task(Q, "edited", process_in=0)  # due now: through its key, like any due keyed task
            async with serving(backend.new_async(), _mux(runs), queues=[Q], concurrency=5):
                await until(lambda: insp.task_info(Q, "later").state is TaskState.BLOCKED, 5)
                await until(lambda: sum(len(r) for r in runs.values()) == 4, 10)
        assert [n for n, _, _ in runs["k"]] == [0, 1] and _serial(runs["k"])
        assert [n for n, _, _ in runs["f"]] == [2] and [n for n, _, _ in runs["e"]] == [3]
        assert not backend.sync.hlen(queue_keys(Q).keyheld) and stats(backend, Q).scheduled == 0

    asyncio.run(main())


def test_an_edit_to_due_now_goes_through_the_key_whatever_the_editors_clock(backend: Any) -> None:
    """Issue 29 #9: edit_task decided "due now" for a keyed scheduled task by the editor's clock; an
    editor whose clock is behind Redis's sent a due time that was past for Redis but future for
    itself, and the script moved the task straight to pending, past its key's holder. The script
    decides it now, on the Redis clock: the task stays scheduled, due, and waits for its key."""
    from asynqpy.core.model.clock import Clock

    class Behind(Clock):
        def local_ms(self) -> int:
            return super().local_ms() - 3_600_000  # an hour behind, never corrected

    with Client(backend.sync) as c, Inspector(backend.sync, clock=Behind()) as insp:
        c.enqueue("step", {"key": "k", "n": 0}, queue=Q, key="k", task_id="holder")
        c.enqueue("step", {"key": "k", "n": 1}, queue=Q, key="k", task_id="later", process_in=3600)
        redis_now = int(time.time() * 1000)  # (this process's clock is the Redis host's here)
        for change in ({"process_at": (redis_now - 60_000) / 1000}, {"process_in": 0}):
            insp.edit_task(Q, "later", **change)
            assert insp.task_info(Q, "later").state is TaskState.SCHEDULED  # not pending past "holder"
        assert insp.task_info(Q, "holder").state is TaskState.PENDING
        assert stats(backend, Q).pending == 1


def test_a_keyed_batch_is_one_script_call_per_queue_and_keeps_each_keys_order() -> None:
    """enqueue_many of keyed tasks: one enqueue_keyed_many call per queue per batch (was one
    script per task), each task's reply as enqueue_keyed gives it (state, or its id conflict), and
    each key's tasks run in the batch's order."""
    import fakeredis

    from asynqpy import TaskIdConflictError

    r = fakeredis.FakeRedis()
    with Client(r) as c:
        built: list[str] = []
        for name in ("enqueue_keyed", "enqueue_keyed_many", "enqueue_many", "enqueue"):
            real = getattr(c.broker, name)
            setattr(c.broker, name, lambda *a, _real=real, _name=name, **kw: (built.append(_name), _real(*a, **kw))[1])
        c.enqueue("step", -1, queue=Q, key="b", task_id="taken")
        built.clear()
        items = [("step", i, {"key": "ab"[i % 2]}) for i in range(8)] + [("step", 99, {"key": "c", "task_id": "taken"})]
        got = c.enqueue_many(items, queue=Q, return_exceptions=True)
        assert built == ["enqueue_keyed_many"]
        assert [g.state for g in got[:8]] == [TaskState.PENDING, TaskState.BLOCKED] + [TaskState.BLOCKED] * 6
        assert isinstance(got[8], TaskIdConflictError)
        assert c.enqueue_many([("step", 0, {"key": "z"}), ("step", 1)], queue="other")[0].state is TaskState.PENDING
        assert sorted(built[1:]) == ["enqueue_keyed_many", "enqueue_many"]
    k = queue_keys(Q)
    for key, first in (("a", 0), ("b", 1)):
        blocked = [got.ids[i] for i in range(first, 8, 2)]
        listed = [x.decode() for x in r.lrange(k.key_list(key), 0, -1)]
        assert listed == (blocked[1:] if key == "a" else blocked), key  # the holder is not listed


def test_due_keyed_tasks_are_gated_in_one_call_each_on_its_own(backend: Any) -> None:
    """A due keyed task whose key no task holds takes it in the forward itself; one whose key is
    held is left in place, named with its key, and the forwarder gates a batch of those in one
    ``key_gate`` call (the keys' lists of a queue share its slot: a durable run's timers fall due by
    the thousand), where each queues behind its key's holder; a task named under a key it no longer
    has (edited) and one not due yet are left as they are. Each task's event once: enqueued (the
    forward's), blocked (the gate's), those of one kind in entries of many ids."""
    from asynqpy.core.limits.serial import gate_due
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor, run_plan

    r, b = backend.sync, Broker()
    ex = SyncExecutor(r)
    q = queue_keys(Q)
    with Client(r) as c:  # (ids in due order: tasks due in one millisecond are taken by id)
        for n, (id, key) in enumerate((("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b"))):
            c.enqueue("step", {"key": key, "n": n}, queue=Q, key=key, process_in=0.05, task_id=id)
        c.enqueue("step", {"key": "c", "n": 5}, queue=Q, key="c", process_in=3600, task_id="later")

    def due() -> bool:  # the four short ones are due by Redis's clock (the scripts' clock)
        secs, micros = r.time()
        return int(r.zcount(q.scheduled, "-inf", secs * 1000 + micros // 1000)) == 4

    wait_sync(due, 10)
    named = ex.run(b.forward(Q, 100))
    assert named.keyed == [("a2", "a"), ("b2", "b")] and named[0] == 2  # a1 and b1 took their free keys
    got = ex.run(b.key_gate(Q, [("a2", "a"), ("b2", "a"), ("later", "c")]))  # (b2's key is not "a": as if edited)
    assert got == [TaskState.BLOCKED, None, None]
    assert r.zscore(q.scheduled, "b2") is not None and r.zscore(q.scheduled, "later") is not None
    assert run_plan(ex, gate_due(b, Q, [("b2", "b"), ("later", "c")])) == 1  # b2 queues behind b1; later is not due
    info = {i: Inspector(r).task_info(Q, i).state for i in ("a1", "a2", "b1", "b2", "later")}
    assert info == {"a1": TaskState.PENDING, "a2": TaskState.BLOCKED, "b1": TaskState.PENDING,
                    "b2": TaskState.BLOCKED, "later": TaskState.SCHEDULED}
    assert [x.decode() for x in r.lrange(q.key_list("a"), 0, -1)] == ["a2"]
    gated = [(e.event, e.task_id, e.type) for e in Inspector(r).events(Q) if e.event in ("enqueued", "blocked")]
    assert sorted(gated) == [("blocked", "a2", "step"), ("blocked", "b2", "step"), ("enqueued", "a1", "step"),
                             ("enqueued", "b1", "step")]
