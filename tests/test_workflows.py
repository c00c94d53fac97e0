"""Workflows: ``after=`` (a task waits until every parent completed, then runs with their results),
the failure policies (cancel, run, ignore), parents in other queues (other cluster slots), fan-in,
idempotent steps (a resolve repeated, an end delivered before the child is stored), typed errors.
On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import serving, stats, until

from asynqpy import Client, Inspector, InvalidArgumentError, ServeMux, Task, TaskNotFoundError, TaskState
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.workflows import plans as flows
from asynqpy.core.workflows import records as workflow
from asynqpy.redisio.executor import SyncExecutor, run_plan

Q, R = "wfa", "wfb"  # two queues: two hash tags, two slots on a cluster


def _mux(log: list[tuple[str, Any, list[Any]]]) -> ServeMux:
    mux = ServeMux()

    @mux.handle("add")
    async def add(task: Task) -> Any:
        log.append((task.id, task.payload, task.parent_results))
        return task.payload + sum(x for x in task.parent_results if x is not None)

    @mux.handle("boom")
    async def boom(task: Task) -> None:
        log.append((task.id, task.payload, task.parent_results))
        raise RuntimeError("boom")

    return mux


def test_a_child_waits_for_its_parents_then_runs_with_their_results(backend: Any) -> None:
    log: list[tuple[str, Any, list[Any]]] = []

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            a = c.enqueue("add", 1, queue=Q, task_id="a")
            b = c.enqueue("add", 10, queue=R, task_id="b")
            child = c.enqueue("add", 100, queue=Q, task_id="child", after=[a, b], retention=60)
            assert child.state is TaskState.WAITING
            assert stats(backend, Q).waiting == 1 and stats(backend, Q).pending == 1
            assert [t.id for t in insp.list_tasks(Q, TaskState.WAITING)] == ["child"]
            async with serving(backend.new_async(), _mux(log), queues=[Q, R]):
                await until(lambda: insp.task_info(Q, "child").state is TaskState.COMPLETED)
            assert insp.task_info(Q, "child").result == 111
        ran = [x[0] for x in log]
        assert ran.index("child") > max(ran.index("a"), ran.index("b"))
        assert log[ran.index("child")][2] == [1, 10]  # in after= order
        assert stats(backend, Q).waiting == 0

    asyncio.run(main())


def test_a_chain_across_queues_passes_each_result_on(backend: Any) -> None:
    log: list[tuple[str, Any, list[Any]]] = []

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), _mux(log), queues=[Q, R]):
                prev = c.enqueue("add", 1, queue=Q)
                for i in range(5):
                    prev = c.enqueue("add", 1, queue=(R if i % 2 == 0 else Q), after=prev,
                                     retention=60 if i == 4 else 0)
                last = prev
                await until(lambda: insp.task_info(last.queue, last.id).state is TaskState.COMPLETED)
                assert insp.task_info(last.queue, last.id).result == 6
        assert [x[1] + sum(x[2]) for x in log] == [1, 2, 3, 4, 5, 6]

    asyncio.run(main())


def test_a_parent_that_already_completed_or_is_gone(backend: Any) -> None:
    log: list[tuple[str, Any, list[Any]]] = []

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), _mux(log), queues=[Q]):
                kept = c.enqueue("add", 5, queue=Q, retention=60)
                await until(lambda: insp.task_info(Q, kept.id).state is TaskState.COMPLETED)
                child = c.enqueue("add", 1, queue=Q, after=kept, retention=60)
                assert child.state is TaskState.PENDING  # nothing to wait for
                await until(lambda: insp.task_info(Q, child.id).state is TaskState.COMPLETED)
                assert insp.task_info(Q, child.id).result == 6
            with pytest.raises(TaskNotFoundError):
                c.enqueue("add", 1, queue=Q, after=("wfa", "no-such-task"))
        assert stats(backend, Q).waiting == 0  # a refused child is not stored

    asyncio.run(main())


@pytest.mark.parametrize("policy", ["cancel", "run", "ignore"])
def test_failure_policies(backend: Any, policy: str) -> None:
    log: list[tuple[str, Any, list[Any]]] = []

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            ok = c.enqueue("add", 1, queue=Q, task_id="ok")
            bad = c.enqueue("boom", 0, queue=R, task_id="bad", max_retry=0)
            child = c.enqueue("add", 100, queue=Q, task_id="child", after=[ok, bad], on_parent_failure=policy,
                              retention=60)
            grandchild = c.enqueue("add", 1000, queue=R, task_id="gc", after=child, retention=60)
            async with serving(backend.new_async(), _mux(log), queues=[Q, R]):
                if policy == "cancel":
                    await until(lambda: insp.task_info(R, "gc").state is TaskState.ARCHIVED)
                    c_info = insp.task_info(Q, "child")
                    assert c_info.state is TaskState.ARCHIVED and "parent wfb/bad was archived" in c_info.last_error
                    assert "parent wfa/child was archived" in insp.task_info(R, "gc").last_error
                else:
                    await until(lambda: insp.task_info(R, "gc").state is TaskState.COMPLETED)
                    assert insp.task_info(Q, "child").result == 101
            ran = {x[0]: x[2] for x in log}
            if policy == "cancel":
                assert "child" not in ran and "gc" not in ran
            else:
                assert ran["child"] == ([1, None] if policy == "run" else [1])
                assert ran["gc"] == [101]
            assert grandchild.state is TaskState.WAITING

    asyncio.run(main())


def test_resolving_twice_and_an_end_before_the_child_is_stored(backend: Any) -> None:
    """The steps are idempotent: a propagator that repeats a resolve changes nothing; an end that
    arrives between the child's registration and its storing is kept and counted."""
    b, x = Broker(), SyncExecutor(backend.sync)
    with Client(backend.sync) as c:
        c.enqueue("add", 1, queue=Q, task_id="p1")
        c.enqueue("add", 1, queue=Q, task_id="p2")
        child = c.enqueue("add", 1, queue=R, task_id="k", after=["p1", "p2"] and [(Q, "p1"), (Q, "p2")])
        assert child.state is TaskState.WAITING
    p1 = workflow.ref(Q, "p1")
    done = workflow.end_state("c", b"\x05")
    assert x.run(b.resolve(R, "k", p1, done)) == 2
    assert x.run(b.resolve(R, "k", p1, done)) == 2  # a repeat: still one parent outstanding
    rec = x.run(b.deps(R, "k"))
    assert rec is not None and rec.outstanding == 1 and rec.parents[0].result == 5
    assert x.run(b.resolve(R, "k", workflow.ref(Q, "p2"), b"c")) == 1
    assert x.run(b.resolve(R, "k", workflow.ref(Q, "p2"), b"c")) == 0
    assert stats(backend, R).pending == 1 and stats(backend, R).waiting == 0
    # an end delivered before the child exists is kept, and the child then needs no wait for it
    assert x.run(b.resolve(R, "early", p1, done)) == 0
    from asynqpy.core.model import options as opts

    p = opts.prepare("add", 1, queue=R, task_id="early", after=[(Q, "p1")])
    ends = [(p1, b"")]
    assert x.run(b.enqueue_after(R, "early", p.msg, "c", ends, p.data, True)) is TaskState.PENDING
    assert stats(backend, R).pending == 2


def test_bad_after_is_a_typed_error_and_nothing_queued_is_lost(backend: Any) -> None:
    with Client(backend.sync) as c:
        c.enqueue("add", 1, queue=Q, task_id="keep")
        for bad in ([], [123], [("q", "")], "x" * 2000, "\ud800"):
            with pytest.raises(InvalidArgumentError):
                c.enqueue("add", 1, queue=Q, after=bad)
        with pytest.raises(InvalidArgumentError):
            c.enqueue("add", 1, queue=Q, after="keep", on_parent_failure="maybe")
        with pytest.raises(InvalidArgumentError):
            c.enqueue("add", 1, queue=Q, after="keep", group="g")
        with pytest.raises(InvalidArgumentError):
            c.enqueue_many([("add", 1, {"after": "keep"})], queue=Q)
        c.enqueue("add", 1, queue=Q, task_id="grouped", group="g")
        c.enqueue("add", 1, queue=Q, task_id="targeted", workers=["w1"])
        for parent in ("grouped", "targeted"):
            with pytest.raises(InvalidArgumentError, match="cannot be a parent"):
                c.enqueue("add", 1, queue=Q, after=parent)
    assert stats(backend, Q).pending == 1 and stats(backend, Q).waiting == 0 and stats(backend, Q).targeted == 1


def test_deleting_a_parent_tells_its_children_and_deleting_a_waiting_child(backend: Any) -> None:
    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            c.enqueue("add", 1, queue=Q, task_id="par")
            c.enqueue("add", 1, queue=R, task_id="kid", after=[(Q, "par")], on_parent_failure="cancel")
            c.enqueue("add", 1, queue=R, task_id="kid2", after=[(Q, "par")])
            insp.delete_task(R, "kid2")  # a waiting task can be deleted
            assert stats(backend, R).waiting == 1
            insp.delete_task(Q, "par")
            async with serving(backend.new_async(), _mux([]), queues=[Q, R], recover_interval=0.2):
                await until(lambda: insp.task_info(R, "kid").state is TaskState.ARCHIVED)
            assert "was deleted" in insp.task_info(R, "kid").last_error
            assert not backend.sync.exists(queue_keys(Q).outbox) or backend.sync.xlen(queue_keys(Q).outbox) == 0

    asyncio.run(main())


def test_chain_group_and_fan_in_helpers(backend: Any) -> None:
    from asynqpy import Sig, chain, group

    log: list[tuple[str, Any, list[Any]]] = []

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            flow = chain(Sig("add", 1, queue=Q), group(*(Sig("add", i, queue=R) for i in (10, 20, 30))),
                         Sig("add", 0, queue=Q, retention=60))
            infos = flow.enqueue(c)
            assert len(infos) == 5 and [i.state for i in infos[1:]] == [TaskState.WAITING] * 4
            last = infos[-1]
            async with serving(backend.new_async(), _mux(log), queues=[Q, R]):
                await until(lambda: insp.task_info(Q, last.id).state is TaskState.COMPLETED)
            assert insp.task_info(Q, last.id).result == (1 + 10) + (1 + 20) + (1 + 30)
            assert dict((x[0], x[2]) for x in log)[last.id] == [11, 21, 31]
            with pytest.raises(InvalidArgumentError):
                Sig("add", 1, after="x")
            with pytest.raises(InvalidArgumentError):
                chain()

    asyncio.run(main())


def test_async_client_and_typed_task_functions(backend: Any) -> None:
    from asynqpy import App, AsyncClient, chain, current_task

    app = App(backend.sync)

    @app.task(queue=Q, retention=60)
    def double(x: int) -> int:
        prev = current_task().parent_results
        return 2 * (prev[0] if prev else x)

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as ac:
            infos = await chain(double.s(3), double.s(0), double.s(0)).aenqueue(ac)
        with Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), app.mux, queues=[Q]):
                await until(lambda: insp.task_info(Q, infos[-1].id).state is TaskState.COMPLETED)
            assert insp.task_info(Q, infos[-1].id).result == 24

    asyncio.run(main())


def test_inspecting_a_workflow_its_tree_and_the_cli(backend: Any) -> None:
    import json

    from click.testing import CliRunner

    from asynqpy import Sig, chain, group
    from asynqpy.cli.main import main as cli

    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        infos = chain(Sig("add", 1, queue=Q, task_id="root"),
                      group(Sig("add", 2, queue=R, task_id="left"), Sig("add", 3, queue=Q, task_id="right")),
                      Sig("add", 4, queue=R, task_id="join", on_parent_failure="run")).enqueue(c)
        assert [i.id for i in infos] == ["root", "left", "right", "join"]
        join = insp.task_info(R, "join")
        assert [(p.queue, p.id, p.state) for p in join.parents] == [(R, "left", "waiting"), (Q, "right", "waiting")]
        assert join.on_parent_failure == "run"
        assert insp.task_info(Q, "root").children == [(R, "left"), (Q, "right")]
        roots = insp.workflow(R, "join")
        assert len(roots) == 1 and roots[0].id == "root"
        walked = [(d, n.id, n.state, n.repeated) for d, n in roots[0].walk()]
        assert walked == [(0, "root", "pending", False), (1, "left", "waiting", False), (2, "join", "waiting", False),
                          (1, "right", "waiting", False), (2, "join", "waiting", True)]
        lone = c.enqueue("add", 1, queue=Q)
        assert [(n.id, n.children) for n in insp.workflow(Q, lone.id)] == [(lone.id, [])]
        with pytest.raises(TaskNotFoundError):
            insp.workflow(Q, "nope")
    if backend.kind == "fake":
        return  # the CLI connects by URL: real servers only
    url = backend.url
    res = CliRunner().invoke(cli, ["task", "tree", "-q", R, "--id", "join", "--redis-url", url])
    assert res.exit_code == 0, res.output
    assert "wfa/root add pending" in res.output and "wfb/join add waiting" in res.output
    res = CliRunner().invoke(cli, ["task", "tree", "-q", R, "--id", "join", "--json", "--redis-url", url])
    assert json.loads(res.output)[0]["children"][0]["id"] == "left"
    res = CliRunner().invoke(cli, ["task", "inspect", "-q", R, "--id", "join", "--redis-url", url])
    assert res.exit_code == 0 and "wfb/left: waiting" in res.output and "on parent failure" in res.output
    res = CliRunner().invoke(cli, ["task", "tree", "-q", R, "--id", "nope", "--redis-url", url])
    assert res.exit_code == 2 and "not found" in res.output + (res.stderr or "")


def test_a_child_with_a_due_time_is_scheduled_when_released_early(backend: Any) -> None:
    log: list[tuple[str, Any, list[Any]]] = []

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            p = c.enqueue("add", 1, queue=Q, task_id="p", retention=60)
            late = c.enqueue("add", 1, queue=R, task_id="late", after=p, process_in=600)
            soon = c.enqueue("add", 1, queue=R, task_id="soon", after=p, process_in=0.3, retention=60)
            assert late.state is TaskState.WAITING and soon.state is TaskState.WAITING
            async with serving(backend.new_async(), _mux(log), queues=[Q, R]):
                await until(lambda: insp.task_info(R, "late").state is TaskState.SCHEDULED)
                await until(lambda: insp.task_info(R, "soon").state is TaskState.COMPLETED)
                info = insp.task_info(R, "late")
                assert info.next_process_at is not None
                ended = c.enqueue("add", 1, queue=R, task_id="ended", after=p, process_in=600)
                assert ended.state is TaskState.SCHEDULED  # its parent had completed: no wait
            assert [x[0] for x in log] == ["p", "soon"]

    asyncio.run(main())


def test_cli_enqueue_after(backend: Any) -> None:
    if backend.kind == "fake":
        return  # the CLI connects by URL
    from click.testing import CliRunner

    from asynqpy.cli.main import main as cli

    url = backend.url
    with Client(backend.sync) as c:
        c.enqueue("add", 1, queue=R, task_id="up")
        c.enqueue("add", 1, queue=Q, task_id="here")

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["enqueue", "add", "--payload", "2", "-q", Q, *args, "--redis-url", url])

    res = run("--after", "here", "--after", f"{R}/up", "--on-parent-failure", "run", "--task-id", "kid")
    assert res.exit_code == 0 and "kid to wfa: waiting" in res.output, res.output
    with Inspector(backend.sync) as insp:
        info = insp.task_info(Q, "kid")
        assert [(p.queue, p.id) for p in info.parents] == [(Q, "here"), (R, "up")] and info.on_parent_failure == "run"
    res = run("--after", "nope")
    assert res.exit_code == 2 and "no task 'nope'" in res.output + (res.stderr or "")
    res = run("--on-parent-failure", "run")
    assert res.exit_code == 2 and "--after" in res.output + (res.stderr or "")
    assert stats(backend, Q).waiting == 1  # nothing else stored


def test_a_propagator_killed_before_forgetting_an_end_releases_nothing_twice(backend: Any) -> None:
    """The propagator's steps driven by hand: every resolve ran, then it 'died' before the XDEL.
    The next pass delivers the entry again: the child, already pending, is not pushed twice, and
    the outbox empties."""
    b, x = Broker(), SyncExecutor(backend.sync)
    with Client(backend.sync) as c:
        c.enqueue("add", 1, queue=Q, task_id="par")
        c.enqueue("add", 1, queue=R, task_id="kid", after=[(Q, "par")])
    # the parent completes (as a worker would): lease it, then complete it
    from asynqpy.core.model.codec import decode
    from asynqpy.core.spine.stored import message_of

    x.run(b.dequeue(Q, 1, 30_000, "tok00001"))
    stored = backend.sync.hget(queue_keys(Q).tasks, "par")
    msg = decode(message_of(stored)).with_(result=7, retention_ms=60_000)
    told = x.run(b.complete(Q, "par", "tok00001", msg))
    assert told.told  # type: ignore[attr-defined]
    plan = flows.propagate(b, Q)
    calls = next(plan)
    while True:
        replies = x.run_many(calls)
        calls = plan.send(replies)
        if calls and calls[0].command and calls[0].command[0] == "XDEL":
            break  # killed here: the resolves ran, the entry is still in the outbox
    assert stats(backend, R).pending == 1 and backend.sync.xlen(queue_keys(Q).outbox) == 1
    assert run_plan(x, flows.propagate(b, Q)) == (1, set())  # the next pass
    assert stats(backend, R).pending == 1 and backend.sync.xlen(queue_keys(Q).outbox) == 0
    assert x.run(b.deps(R, "kid")).parents[0].result == 7  # type: ignore[union-attr]
