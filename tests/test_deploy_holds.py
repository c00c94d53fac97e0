"""Deploy holds (issue 34; docs/deploy.md "Holding tasks during a deploy"): a blocked task type
and a version gate. A task no worker may run is held in its queue's scheduled zset (state 's',
at a score above any due time), so it meets every other mechanism as a scheduled task does:
delete, archive, cancel, edit and run now apply to it; a tenant task gives its tenant's slot back;
a keyed task keeps its key; the forwarder and drain never take it for due. On fakeredis,
redis-server and the Cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import serving, until

from asynqpy import App, Client, Inspector, InvalidArgumentError, ServeMux, Task, TaskState
from asynqpy.cli.main import main
from asynqpy.core.deploy.versions import HOLD_FLOOR, TYPE_BAND, VERSION_BAND, encode_version, format_version
from asynqpy.core.model.codec import decode
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

Q = "dq"


def _take(backend: Any, version: str | None = None, batch: int = 1, done: bool = True) -> list[Any]:
    """Dequeue ``batch`` at a time as a worker of ``version`` until a call takes nothing: the
    payloads taken, in order (each done at once unless ``done`` is False)."""
    ex, b = SyncExecutor(backend.sync), Broker()
    code = 0 if version is None else encode_version(version)
    out: list[Any] = []
    for _ in range(200):
        got = ex.run(b.dequeue(Q, batch, 30_000, "tok00001", "w", code))
        if not got.tasks and got.remaining <= 0:
            return out
        out += [decode(m).payload for _, m in got.tasks]
        if done:
            ex.run_many([b.done(Q, id, "tok00001", decode(m)) for id, m in got.tasks])
    raise AssertionError("the queue never emptied")


def test_a_blocked_type_is_held_and_comes_back_first_in_order(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        assert insp.block_type(Q, "old") == ["old"]
        assert insp.block_type(Q, "other") == ["old", "other"]
        for i in range(3):
            c.enqueue("old", f"o{i}", queue=Q)
            c.enqueue("new", f"n{i}", queue=Q)
        assert _take(backend, batch=2) == ["n0", "n1", "n2"]  # the others run; "old" is held
        held = insp.list_tasks(Q, TaskState.SCHEDULED)
        assert sorted(t.payload for t in held) == ["o0", "o1", "o2"]
        assert {t.held for t in held} == {"type"} and all(t.next_process_at is None for t in held)
        assert insp.queue_info(Q).pending == 0
        c.enqueue("new", "n3", queue=Q)
        assert insp.unblock_type(Q, "old") == 3
        assert insp.blocked_types(Q) == ["other"]
        assert _take(backend) == ["o0", "o1", "o2", "n3"]  # back at the front, oldest first
        assert insp.unblock_type(Q, "other") == 0 and insp.blocked_types(Q) == []
        assert backend.sync.hkeys(queue_keys(Q).conf) == [b"kept"]  # nothing kept (but the event stream's count)


def test_a_version_gate_sets_a_task_aside_for_a_newer_worker(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("t", "v2", queue=Q, min_worker_version="2.0")
        c.enqueue("t", "v3", queue=Q, min_worker_version="3.1.4")
        c.enqueue("t", "any", queue=Q)
        assert _take(backend) == ["any"]  # a worker without a version runs none of the gated
        assert _take(backend, "1.9") == []
        info = {t.payload: t for t in insp.list_tasks(Q, TaskState.SCHEDULED)}
        assert {p: (t.held, t.min_worker_version) for p, t in info.items()} == \
            {"v2": ("version", "2.0.0"), "v3": ("version", "3.1.4")}
        assert _take(backend, "2.5") == ["v2"]  # v3 stays for a 3.1.4 worker
        assert _take(backend, "v3.1.4") == ["v3"]
        assert insp.queue_info(Q).scheduled == 0


def test_held_tasks_meet_the_operator_actions_as_scheduled_tasks(backend: Any) -> None:
    """Delete, archive, edit and run now apply to a held task; run now of a task of a type still
    blocked holds it again at the next dequeue."""
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.block_type(Q, "b")
        ids = [c.enqueue("b", f"x{i}", queue=Q).id for i in range(4)]
        assert _take(backend) == []
        insp.delete_task(Q, ids[0])
        insp.archive_task(Q, ids[1])
        insp.edit_task(Q, ids[2], payload="edited")
        assert insp.task_info(Q, ids[2]).held == "type"
        insp.run_task(Q, ids[3])  # run now: pending, held again by the next dequeue
        assert insp.task_info(Q, ids[3]).state is TaskState.PENDING
        assert _take(backend) == [] and insp.task_info(Q, ids[3]).held == "type"
        assert insp.task_info(Q, ids[1]).state is TaskState.ARCHIVED
        assert insp.unblock_type(Q, "b") == 2
        assert _take(backend) == ["edited", "x3"]


def test_a_tenant_task_held_frees_its_slot_and_a_keyed_one_keeps_its_key(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "acme", concurrency=1)
        insp.block_type(Q, "b")
        c.enqueue("b", "held", queue=Q, tenant="acme")
        runs = c.enqueue("t", "runs", queue=Q, tenant="acme")
        k1 = c.enqueue("b", "k1", queue=Q, key="k")
        c.enqueue("t", "k2", queue=Q, key="k")
        # the held tenant task gave its slot back (else "runs" would wait behind it); k2 waits
        # behind k1, which holds its key while held
        assert _take(backend, done=False) == ["runs"]
        assert backend.sync.hkeys(queue_keys(Q).ta) == [runs.id.encode()]
        assert insp.task_info(Q, k1.id).held == "type" and insp.queue_info(Q).blocked == 1
        assert insp.unblock_type(Q, "b") == 2
        stored = backend.sync.hget(queue_keys(Q).tasks, runs.id)
        SyncExecutor(backend.sync).run(Broker().done(Q, runs.id, "tok00001", decode(stored[9:])))
        assert sorted(_take(backend)) == ["held", "k1", "k2"]


def test_a_targeted_task_of_a_blocked_type_gives_no_run_until_unblocked(backend: Any) -> None:
    """A targeted task (workers=, runs=) is not pending: it stays targeted, its runs not handed
    out while its type is blocked (min_worker_version is refused for it: test below)."""
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.block_type(Q, "b")
        t = c.enqueue("b", "x", queue=Q, workers=["w"])
        assert ex.run(b.dequeue(Q, 1, 30_000, "tok00001", "w")).tasks == []
        assert insp.task_info(Q, t.id).state is TaskState.TARGETED
        insp.unblock_type(Q, "b")
        assert [i for i, _ in ex.run(b.dequeue(Q, 1, 30_000, "tok00001", "w")).tasks] == [f"{t.id}|w"]


def test_a_held_task_does_not_leave_a_worker_held_back_by_the_concurrency_limit(backend: Any) -> None:
    """Found by the cross-feature model: with a queue limit of 1, a dequeue whose one slot went to a
    task it then held told the worker it was held back by the limit (a wait of up to 1 s, no
    wake token) though the slot was free and tasks were pending."""
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_limits(Q, concurrency=1)
        insp.block_type(Q, "b")
        c.enqueue("b", "held", queue=Q)
        c.enqueue("t", "next", queue=Q)
        backend.sync.delete(queue_keys(Q).wake)
        got = ex.run(b.dequeue(Q, 2, 30_000, "tok00001"))
        assert got.tasks == [] and not got.slot_bound and got.remaining == 1
        assert backend.sync.llen(queue_keys(Q).wake) == 1  # a worker is woken for "next"
        assert _take(backend) == ["next"]


def test_the_forwarder_and_drain_never_take_a_held_task_for_due(backend: Any) -> None:
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.block_type(Q, "b")
        c.enqueue("b", "x", queue=Q)
        assert _take(backend) == []
        moved, next_ms = ex.run(b.forward(Q, 100))[:2]
        assert moved == 0 and next_ms == -1  # nothing due, nothing to wait for
        score = backend.sync.zrange(queue_keys(Q).scheduled, 0, 0, withscores=True)[0][1]
        assert TYPE_BAND <= score < TYPE_BAND + 10**13 and score >= HOLD_FLOOR


def test_bad_input_is_refused_and_nothing_queued_is_lost(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        kept = c.enqueue("t", "kept", queue=Q)
        for bad in ("", "1.x", "1.2.3.4", "10000", "2.0-rc1", 2):
            with pytest.raises(InvalidArgumentError):
                c.enqueue("t", "no", queue=Q, min_worker_version=bad)
        with pytest.raises(InvalidArgumentError, match="min_worker_version applies"):
            c.enqueue("t", "no", queue=Q, min_worker_version="1", workers=["a"])
        for bad_type in ("", "a\0b", 3):
            with pytest.raises(InvalidArgumentError):
                insp.block_type(Q, bad_type)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            insp.block_type("bad queue!", "t")
        assert [t.id for t in insp.list_tasks(Q, TaskState.PENDING)] == [kept.id]
        assert insp.blocked_types(Q) == []


def test_version_encoding() -> None:
    assert encode_version("2") == encode_version("2.0.0") == 2 * 10**8
    assert encode_version("1.10") > encode_version("1.9.9999")
    assert format_version(encode_version("v4.0.12")) == "4.0.12" and format_version(0) == ""
    assert VERSION_BAND + encode_version("9999.9999.9999") < TYPE_BAND


def test_cli_block_unblock_and_the_workers_version_flag(redis_url: str) -> None:
    def run(*args: str) -> Any:
        return CliRunner().invoke(main, [*args, "--redis-url", redis_url])

    with Client(redis_url) as c:
        c.enqueue("t", "x", queue=Q)
        res = run("queue", "block", Q, "--type", "t")
        assert res.exit_code == 0 and res.stdout == f"blocked type t in queue {Q} (blocked: t)\n", res.output
        assert run("queue", "blocked", Q).stdout == "t\n"
        res = run("queue", "block", Q, "--type", "")
        assert res.exit_code == 2 and res.stderr.startswith("asynqpy: error: ") and len(res.stderr.splitlines()) == 1
        res = run("worker", "x:mux", "--worker-version", "one")
        assert res.exit_code == 2 and "--worker-version: a version is" in res.stderr
        res = run("enqueue", "t", "--queue", Q, "--min-worker-version", "nope")
        assert res.exit_code == 2, res.output
        res = run("queue", "unblock", Q, "--type", "t")
        assert res.exit_code == 0 and res.stdout == f"unblocked type t in queue {Q}: 0 held task(s) back in the queue\n"
        assert run("queue", "blocked", Q).stdout == f"no type is blocked in queue {Q}\n"


def test_a_rolling_deploy_old_and_new_workers_overlap(backend: Any) -> None:
    """Two servers, 1.0 and 2.0, serve one queue: a task gated at 2.0 runs only on the new one; a
    type blocked while they overlap runs on neither until it is unblocked, then once."""
    ran: dict[str, list[str]] = {"1.0": [], "2.0": []}

    def mux_of(version: str) -> ServeMux:
        mux = ServeMux()

        @mux.handle("t")
        async def t(task: Task) -> None:
            ran[version].append(task.payload)

        mux.handle("b")(t)
        return mux

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            insp.block_type(Q, "b")
            c.enqueue("b", "blocked", queue=Q)
            for i in range(6):
                c.enqueue("t", f"new{i}", queue=Q, min_worker_version="2.0")
                c.enqueue("t", f"any{i}", queue=Q)
            async with serving(backend.new_async(), mux_of("1.0"), queues={Q: 1}, version="1.0"), \
                    serving(backend.new_async(), mux_of("2.0"), queues={Q: 1}, version="2.0"):
                await until(lambda: len(ran["1.0"]) + len(ran["2.0"]) == 12)
                await until(lambda: sorted(s.version for s in insp.servers()) == ["1.0", "2.0"])  # server ls
                assert insp.task_info(Q, insp.list_tasks(Q, TaskState.SCHEDULED)[0].id).held == "type"
                assert insp.unblock_type(Q, "b") == 1
                await until(lambda: "blocked" in ran["1.0"] + ran["2.0"])
        assert not [p for p in ran["1.0"] if p.startswith("new")]
        assert sorted(ran["1.0"] + ran["2.0"]) == sorted(["blocked", *(f"new{i}" for i in range(6)),
                                                          *(f"any{i}" for i in range(6))])

    asyncio.run(main())


def test_an_apps_version_is_its_workers(backend: Any) -> None:
    from asynqpy.testing import drain

    app = App(backend.sync, version="3.2")
    seen: list[int] = []

    @app.task(queue=Q, min_worker_version="3.2")
    def add(a: int, b: int) -> None:
        seen.append(a + b)

    add.enqueue(1, 2)
    drain(app, backend.new_async())
    assert seen == [3]


def test_drain_runs_what_an_older_worker_held_for_the_apps_version(backend: Any) -> None:
    """Issue 42 (defect 2): ``testing.drain(App(version="2.0"))`` runs a task an older worker set
    aside for 2.0 (before, it saw nothing pending and returned at once, the task still held), and
    leaves one held for a newer version held (drain returns; it never waits for it)."""
    from asynqpy.testing import drain

    app = App(backend.sync, version="2.0")
    seen: list[str] = []

    @app.task(queue=Q)
    def job(n: str) -> None:
        seen.append(n)

    job.using(min_worker_version="2.0").enqueue("v2")
    job.using(min_worker_version="3.0").enqueue("v3")
    assert _take(backend, "1.4") == []  # an old worker sets both aside
    assert {t.held for t in Inspector(backend.sync).list_tasks(Q, TaskState.SCHEDULED)} == {"version"}
    report = drain(app, backend.new_async())
    assert seen == ["v2"] and report.processed == 1
    held = Inspector(backend.sync).list_tasks(Q, TaskState.SCHEDULED)
    assert [t.min_worker_version for t in held] == ["3.0.0"]
