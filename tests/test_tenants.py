"""Tenants on one queue (``enqueue(..., tenant=)``, issue 32 stage 1; docs/tenants.md): pending
tasks are handed out in turns across the tenants that have work, FIFO and priority within each,
the tasks without a tenant taking turns as one tenant; a quiet tenant's task is the next pick;
nothing is kept once the work is done. Every way a task becomes pending (enqueue, batches, due
scheduled and retry tasks, the shutdown requeue, keys, workflow children, run now, edits) and every
way one leaves pending (dequeue, delete, archive, edit) meets the tenant zset; listings and counts
see tenant tasks. On fakeredis, redis-server and the Cluster."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from helpers import serve_until, wait_sync

from asynqpy import Client, Inspector, InvalidArgumentError, ServeMux, Task, TaskState
from asynqpy.core.model.codec import decode
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

Q = "tq"


def _take(backend: Any, batch: int = 1, limit: int = 1000, drain: bool = True, done: bool = True) -> list[list[Any]]:
    """Dequeue until nothing is pending (or ``limit`` calls, without ``drain``), ``batch`` at a
    time: the payloads of each call."""
    ex, b = SyncExecutor(backend.sync), Broker()
    calls: list[list[Any]] = []
    for _ in range(limit):
        got = ex.run(b.dequeue(Q, batch, 30_000, "tok00001"))
        if not got.tasks:
            return calls
        calls.append([decode(m).payload for _, m in got.tasks])
        if done:  # each ends (its tenant slot freed: the exit path's tenant duty)
            ex.run_many([b.done(Q, id, "tok00001", decode(m)) for id, m in got.tasks])
    if not drain:
        return calls
    raise AssertionError("the queue never emptied")


def _tenant_keys_left(backend: Any) -> list[str]:
    q = queue_keys(Q)
    return [k for k in (q.tq, q.tr, q.tn, q.ta, q.tw) if backend.sync.exists(k)]


def _fill(c: Client) -> None:
    for i in range(6):
        c.enqueue("t", f"a{i}", queue=Q, tenant="a")
    for i in range(3):
        c.enqueue("t", f"b{i}", queue=Q, tenant="b")
    c.enqueue("t", "c0", queue=Q, tenant="c")
    c.enqueue_many([("t", "p0"), ("t", "p1")], queue=Q)  # no tenant: the tenant ''


TURNS = ["p0", "a0", "b0", "c0", "p1", "a1", "b1", "a2", "b2", "a3", "a4", "a5"]
"""The order of _fill's tasks: one turn each for every tenant with work ('' first on a tie)."""


def test_turns_across_tenants_one_task_a_call(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        _fill(c)
        info = insp.queue_info(Q)
        assert info.pending == 12
        listed = [t.payload for t in insp.list_tasks(Q, TaskState.PENDING, page_size=100)]
        assert sorted(listed) == sorted(TURNS) and listed[:2] == ["p0", "p1"]  # plain first, then by tenant
        assert [x for (x,) in _take(backend)] == TURNS
        assert _tenant_keys_left(backend) == []  # nothing kept once the work is done


def test_a_batch_takes_the_same_turns(backend: Any) -> None:
    with Client(backend.sync) as c:
        _fill(c)
        calls = _take(backend, batch=4)
        assert [sorted(x) for x in calls] == [sorted(TURNS[i:i + 4]) for i in range(0, 12, 4)]
        assert _tenant_keys_left(backend) == []


def test_fifo_and_priority_within_a_tenant_and_a_unique_key_per_tenant(backend: Any) -> None:
    with Client(backend.sync) as c:
        c.enqueue("t", "x1", queue=Q, tenant="a")
        c.enqueue("t", "x2", queue=Q, tenant="a", priority=9)
        c.enqueue("t", "x3", queue=Q, tenant="a")
        c.enqueue("t", "x4", queue=Q, tenant="a", priority=0)
        c.enqueue_many([("t", "x5"), ("t", "x6", {"priority": 9})], queue=Q, tenant="a")
        # unique: one tenant's task never suppresses another's (the digest adds the tenant)
        c.enqueue("u", "same", queue=Q, tenant="a", unique=60)
        c.enqueue("u", "same", queue=Q, tenant="b", unique=60)
        assert [x for (x,) in _take(backend)] == ["x2", "same", "x6", "x1", "x3", "x5", "same", "x4"]


def test_a_quiet_tenant_is_the_next_pick(backend: Any) -> None:
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c:
        c.enqueue_many([("t", f"n{i}") for i in range(50)], queue=Q, tenant="noisy")
        c.enqueue_many([("t", f"w{i}") for i in range(20)], queue=Q)
        assert len(ex.run(b.dequeue(Q, 8, 30_000, "tok00001")).tasks) == 8
        c.enqueue("t", "quiet", queue=Q, tenant="quiet")
        got = ex.run(b.dequeue(Q, 1, 30_000, "tok00001"))
        assert [decode(m).payload for _, m in got.tasks] == ["quiet"]
        assert got.remaining == 62


def test_paths_into_pending_keep_the_tenant(backend: Any) -> None:
    """A due scheduled task, a retry (to the back, or with retry_front to the front of its tenant),
    the shutdown requeue (front), run-now of an archived task, a key's next task and a workflow
    child all land in their tenant's range."""
    ex, b = SyncExecutor(backend.sync), Broker()
    q = queue_keys(Q)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        first = c.enqueue("t", "first", queue=Q, tenant="a", retry_front=True, retry_delay=0)
        c.enqueue("t", "second", queue=Q, tenant="a")
        (id1, m1), = ex.run(b.dequeue(Q, 1, 30_000, "tok00001")).tasks
        assert id1 == first.id
        c.enqueue("t", "third", queue=Q, tenant="a")
        assert ex.run(b.retry(Q, id1, "tok00001", decode(m1).with_(retried=1), 0)) > 0
        assert ex.run(b.forward(Q, 100))[0] == 1
        assert [t.payload for t in insp.list_tasks(Q, TaskState.PENDING)] == ["first", "second", "third"]
        (id2, _), = ex.run(b.dequeue(Q, 1, 30_000, "tok00001")).tasks
        assert ex.run(b.requeue(Q, id2, "tok00001")) == 1  # shutdown: back to the front of its tenant
        later = c.enqueue("t", "later", queue=Q, tenant="a", process_in=3600)
        backend.sync.zadd(q.scheduled, {later.id: 1})
        assert ex.run(b.forward(Q, 100))[0] == 1
        gone = c.enqueue("t", "archived", queue=Q, tenant="a")
        insp.archive_task(Q, gone.id)
        insp.run_task(Q, gone.id)  # run now: back of its tenant
        parent = c.enqueue("t", "parent", queue=Q)
        c.enqueue("t", "child", queue=Q, tenant="a", after=[parent.id])
        k1 = c.enqueue("t", "k1", queue=Q, tenant="a", key="k")
        c.enqueue("t", "k2", queue=Q, tenant="a", key="k")
        assert insp.task_info(Q, k1.id).state is TaskState.PENDING
        order = [x for (x,) in _take(backend, done=False)]
        # the tenant '' has "parent" only; the child follows when its parent is done (not here)
        assert order == ["parent", "first", "second", "third", "later", "archived", "k1"]
        assert insp.queue_info(Q).blocked == 1 and insp.queue_info(Q).waiting == 1


def test_keys_and_workflow_children_end_to_end_through_a_server(backend: Any) -> None:
    seen: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def handle(task: Task) -> None:
        seen.append(task.payload)

    with Client(backend.sync) as c:
        parent = c.enqueue("t", "parent", queue=Q, tenant="b")
        c.enqueue("t", "child", queue=Q, tenant="a", after=[parent.id])
        for i in range(3):
            c.enqueue("t", f"k{i}", queue=Q, tenant="a", key="k")
        serve_until(backend, mux, lambda: len(seen) == 5, queues={Q: 1}, concurrency=1)
        assert [x for x in seen if x.startswith("k")] == ["k0", "k1", "k2"]
        assert seen.index("child") > seen.index("parent")
    assert _tenant_keys_left(backend) == []


def test_operator_delete_archive_edit_and_drop_find_tenant_tasks(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp._plans.window = 2  # deeper tasks are located from Python
        ids = [c.enqueue("t", f"a{i}", queue=Q, tenant="a").id for i in range(8)]
        other = c.enqueue("t", "b0", queue=Q, tenant="b")
        insp.delete_task(Q, ids[0])  # near an end of its tenant's range
        insp.delete_task(Q, ids[4])  # deeper than the window: located by its seq
        insp.archive_task(Q, ids[5])
        info = insp.edit_task(Q, ids[6], priority=9, payload="a6!")
        assert info.priority == 9 and info.state is TaskState.PENDING
        assert insp.queue_info(Q).pending == 6
        insp.delete_task(Q, other.id)  # b's last task: b leaves the ring
        assert backend.sync.zscore(queue_keys(Q).tr, "b") is None
        assert [x for (x,) in _take(backend)] == ["a6!", "a1", "a2", "a3", "a7"]
        assert _tenant_keys_left(backend) == []
        for i in range(5):
            c.enqueue("t", i, queue=Q, tenant=f"t{i}")
        assert insp.queue_info(Q).tenants == 5
        assert insp.delete_all(Q, TaskState.PENDING) == 5
        assert insp.queue_info(Q).pending == 0 and _tenant_keys_left(backend) == []


def test_a_resent_enqueue_pushes_nothing_more(backend: Any) -> None:
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c:
        info = c.enqueue("t", "once", queue=Q, tenant="a", task_id="fixed")
        msg = decode(backend.sync.hget(queue_keys(Q).tasks, "fixed")[1:])
        assert msg.tenant == "a" and info.id == "fixed"
        ex.run(b.enqueue(Q, "fixed", msg, check_id=True))  # the same call sent again after a lost reply
        assert backend.sync.zcard(queue_keys(Q).tq) == 1
        assert [x for (x,) in _take(backend)] == ["once"]


def test_bad_tenants_are_refused_and_nothing_queued_is_lost(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("t", "kept", queue=Q, tenant="a")
        for bad, match in ((dict(tenant=""), "tenant must be 1 to 64 bytes"),
                           (dict(tenant="x" * 65), "tenant must be 1 to 64 bytes"),
                           (dict(tenant="a\x00b"), "no control character"),
                           (dict(tenant=3), "tenant must be a string"),
                           (dict(tenant="a", group="g"), "tenant= cannot be combined with group"),
                           (dict(tenant="a", workers=["w"]), "tenant= cannot be combined")):
            with pytest.raises(InvalidArgumentError, match=match):
                c.enqueue("t", "x", queue=Q, **bad)
        assert insp.queue_info(Q).pending == 1
        assert [x for (x,) in _take(backend)] == ["kept"]


def test_a_retry_front_task_is_not_taken_for_a_keyed_one(backend: Any) -> None:
    """A message with a field after the key set (retry_front, tenant) has the key field, empty:
    not a keyed task (lua/includes/serial is_keyed), so run-now of it archived is not refused and
    a scheduled one is forwarded as any other."""
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        t = c.enqueue("t", "rf", queue=Q, retry_front=True)
        insp.archive_task(Q, t.id)
        insp.run_task(Q, t.id)
        s = c.enqueue("t", "later", queue=Q, tenant="a", process_in=3600)
        backend.sync.zadd(queue_keys(Q).scheduled, {s.id: 1})
        assert ex.run(b.forward(Q, 100)) [0] == 1
        assert sorted(x for (x,) in _take(backend)) == ["later", "rf"]


def test_a_periodic_task_takes_its_priority_and_tenant_and_a_queue_with_tenant_tasks_is_not_removed(
        backend: Any) -> None:
    """cron_fire makes its task pending as every other path does (before, it pushed to the list:
    an entry's priority= was ignored)."""
    from asynqpy import QueueNotEmptyError

    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("t", "plain", queue=Q)
        insp.cron_add("hi", "t", "cron-high", every=60, queue=Q, priority=9)
        insp.cron_add("ten", "t", "cron-tenant", every=60, queue=Q, tenant="a")
        insp.cron_run_now("hi", Q)
        insp.cron_run_now("ten", Q)
        assert [x for (x,) in _take(backend)] == ["cron-high", "cron-tenant", "plain"]  # turns: "", a, ""
        c.enqueue("t", "left", queue="tq2", tenant="a")
        with pytest.raises(QueueNotEmptyError):
            insp.remove_queue("tq2")
        assert insp.queue_info("tq2").pending == 1


def test_weights_give_turns_in_proportion(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        assert insp.set_tenant(Q, "heavy", weight=3).weight == 3
        c.enqueue_many([("t", "h") for _ in range(60)], queue=Q, tenant="heavy")
        c.enqueue_many([("t", "l") for _ in range(60)], queue=Q, tenant="light")
        first = [x for (x,) in _take(backend, limit=40, drain=False)]
        assert abs(first.count("h") - 30) <= 1 and abs(first.count("l") - 10) <= 1, first
        got = [x for xs in _take(backend, batch=8, limit=4, drain=False) for x in xs]  # a batch merges the same turns
        assert abs(got.count("h") - 24) <= 2, got


def test_a_paused_tenant_waits_and_comes_back_first(backend: Any) -> None:
    ex, b = SyncExecutor(backend.sync), Broker()
    q = queue_keys(Q)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        info = insp.pause_tenant(Q, "a")  # before it has work: kept as its setting
        assert info.paused and info.pending == 0 and not info.ready
        c.enqueue_many([("t", f"a{i}") for i in range(3)], queue=Q, tenant="a")
        c.enqueue_many([("t", f"b{i}") for i in range(3)], queue=Q, tenant="b")
        backend.sync.delete(q.wake)  # (the enqueues' wake-up, taken by the worker that dequeues)
        got = ex.run(b.dequeue(Q, 10, 30_000, "tok00001"))
        assert sorted(decode(m).payload for _, m in got.tasks) == ["b0", "b1", "b2"]
        assert got.remaining == 0 and backend.sync.llen(q.wake) == 0  # no wake-ups for a paused tenant's tasks
        ex.run_many([b.done(Q, id, "tok00001", decode(m)) for id, m in got.tasks])
        assert insp.queue_info(Q).pending == 3
        (t,) = insp.tenants(Q)
        assert (t.tenant, t.pending, t.paused, t.ready) == ("a", 3, True, False)
        c.enqueue("t", "b3", queue=Q, tenant="b")
        info = insp.resume_tenant(Q, "a")
        assert not info.paused and info.ready and info.pending == 3
        assert backend.sync.llen(q.wake) >= 1  # a worker is told
        assert [x for (x,) in _take(backend)] == ["a0", "b3", "a1", "a2"]  # it comes back at the current turn
        assert insp.clear_tenant(Q, "a").weight == 1
        assert not backend.sync.exists(q.tn)  # nothing kept for a tenant with the defaults and no work


def test_tenant_pages_and_bad_settings(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        for name in ("c", "a", "b"):
            c.enqueue_many([("t", 1)] * 2, queue=Q, tenant=name)
        insp.set_tenant(Q, "b", weight=5)
        page = insp.tenants(Q, count=2)
        assert [(t.tenant, t.pending, t.weight, t.ready) for t in page] == [("a", 2, 1, True), ("b", 2, 5, True)]
        assert [t.tenant for t in insp.tenants(Q, after="b")] == ["c"]
        for call, match in ((lambda: insp.set_tenant(Q, "a", weight=0), "weight must be an int from 1 to 100"),
                            (lambda: insp.set_tenant(Q, "a", weight=101), "weight must be"),
                            (lambda: insp.set_tenant(Q, "", weight=2), "tenant must be 1 to 64 bytes"),
                            (lambda: insp.set_tenant(Q, "a", paused=1), "paused must be True or False"),
                            (lambda: insp.tenants(Q, count=0), "count must be")):
            with pytest.raises(InvalidArgumentError, match=match):
                call()
        assert insp.queue_info(Q).pending == 6 and insp.tenants(Q)[1].weight == 5  # nothing changed


def test_tenant_commands(redis_url: str) -> None:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    url = redis_url.rsplit("/", 1)[0] + "/13"
    with Client(url) as c:
        c.enqueue_many([("t", i) for i in range(3)], queue="cq", tenant="acme")
    run = CliRunner().invoke
    out = run(main, ["queue", "tenant", "cq", "acme", "--weight", "4", "--pause", "--redis-url", url])
    assert out.exit_code == 0 and "weight 4, paused, 3 pending" in out.output, out.output
    out = run(main, ["queue", "tenants", "cq", "--redis-url", url])
    assert out.exit_code == 0 and "acme" in out.output and "paused" in out.output, out.output
    out = run(main, ["queue", "tenants", "cq", "--concurrency", "3", "--redis-url", url])
    assert out.exit_code == 0 and "tenants' defaults weight 1, concurrency 3" in out.output, out.output
    out = run(main, ["queue", "tenants", "cq", "--clear", "--weight", "2", "--redis-url", url])
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
    out = run(main, ["queue", "tenants", "cq", "--clear", "--redis-url", url])
    assert out.exit_code == 0 and "concurrency none" in out.output, out.output
    out = run(main, ["queue", "tenant", "cq", "acme", "--clear", "--redis-url", url])
    assert out.exit_code == 0 and "weight 1, taking turns, 3 pending" in out.output, out.output
    for args in (["--weight", "0"], ["--pause", "--resume"], ["--clear", "--weight", "2"]):
        out = run(main, ["queue", "tenant", "cq", "acme", *args, "--redis-url", url])
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
    out = run(main, ["enqueue", "t", "--queue", "cq", "--tenant", "", "--redis-url", url])
    assert out.exit_code == 2 and "tenant must be" in out.output, out.output
    with Inspector(url) as insp:
        assert insp.queue_info("cq").pending == 3  # nothing queued or lost by the refused commands
    # issue 42: a held tenant says what holds it (it said "no pending task, 2 pending")
    out = run(main, ["queue", "tenants", "cq", "--concurrency", "1", "--redis-url", url])  # the defaults
    SyncExecutor(redis.Redis.from_url(url)).run(Broker().dequeue("cq", 1, 60_000, "tok00001"))
    out = run(main, ["queue", "tenant", "cq", "acme", "--redis-url", url])
    assert out.exit_code == 0 and "held by its concurrency (1 of 1 active), 2 pending" in out.output, out.output
    out = run(main, ["queue", "tenants", "cq", "--redis-url", url])
    assert "held: concurrency" in out.output, out.output
    out = run(main, ["queue", "tenants", "nobody-here", "--redis-url", url])  # no bare frame
    assert out.exit_code == 0 and out.output == "no tenants in queue nobody-here (a tenant is listed while it has " \
        "pending tasks)\n", out.output
    redis.Redis.from_url(url).flushdb()  # (the task still leased with it)


def test_a_tenants_state_says_what_holds_it() -> None:
    from asynqpy.core.tenants.plans import TenantInfo, state_text

    assert state_text(TenantInfo("a", 5, paused=True)) == "paused"
    assert state_text(TenantInfo("a", 5, ready=True)) == "taking turns"
    assert state_text(TenantInfo("a", 0)) == "no pending task"
    assert state_text(TenantInfo("a", 2185, rate=2.0)) == "held by its rate (2/s) until its next task is due"
    assert state_text(TenantInfo("a", 3, concurrency=2, active=2)) == "held by its concurrency (2 of 2 active)"
    assert state_text(TenantInfo("a", 3)).startswith("held back")


def _active(backend: Any, tenant: str) -> int:
    q = queue_keys(Q)
    n = int(backend.sync.hget(q.tn, f"a:{tenant}") or 0)
    assert n == sum(1 for v in backend.sync.hvals(q.ta) if v.decode() == tenant)  # the count and the entries agree
    return n


def test_a_tenants_concurrency_holds_across_workers_and_every_way_out_frees_its_slot(backend: Any) -> None:
    import random

    ex, b = SyncExecutor(backend.sync), Broker()
    q = queue_keys(Q)
    rnd = random.Random(7)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        assert insp.set_tenant(Q, "capped", concurrency=2).concurrency == 2
        c.enqueue_many([("t", f"c{i}") for i in range(12)], queue=Q, tenant="capped", max_retry=5)
        c.enqueue_many([("t", f"f{i}") for i in range(12)], queue=Q, tenant="free")
        running: dict[str, tuple[str, Any]] = {}
        for step in range(60):  # four workers take batches and end tasks in every way, interleaved
            token = f"tok{step % 4:05d}"
            for id, m in ex.run(b.dequeue(Q, rnd.randint(1, 5), 30_000, token)).tasks:
                running[id] = (token, decode(m))
            assert _active(backend, "capped") <= 2
            if running and rnd.random() < 0.7:
                id = rnd.choice(sorted(running))
                token, msg = running.pop(id)
                how = rnd.choice(["done", "retry", "archive", "snooze", "requeue"])
                if how == "done":
                    ex.run(b.done(Q, id, token, msg))
                elif how == "retry":
                    ex.run(b.retry(Q, id, token, msg.with_(retried=msg.retried + 1), 0))
                    ex.run(b.forward(Q, 100))
                elif how == "archive":
                    ex.run(b.archive(Q, id, token, msg, 100, 3_600_000))
                elif how == "snooze":
                    ex.run(b.snooze(Q, id, token, 0))
                    ex.run(b.forward(Q, 100))
                else:
                    ex.run(b.requeue(Q, id, token))
            assert _active(backend, "capped") <= 2
        for id, (token, msg) in running.items():
            ex.run(b.done(Q, id, token, msg))
        assert _active(backend, "capped") == 0 and _active(backend, "free") == 0
        # held at its limit, a tenant is out of the ring; the end of one of its tasks puts it back
        # and wakes a worker
        c.enqueue_many([("t", f"more{i}") for i in range(4)], queue=Q, tenant="capped")
        got = ex.run(b.dequeue(Q, 10, 30_000, "tok00009")).tasks
        capped = [(id, decode(m)) for id, m in got if decode(m).tenant == "capped"]
        assert len(capped) == 2 and backend.sync.zscore(q.tr, "capped") is None
        backend.sync.delete(q.wake)
        ex.run(b.done(Q, capped[0][0], "tok00009", capped[0][1]))
        assert backend.sync.zscore(q.tr, "capped") is not None and backend.sync.llen(q.wake) == 1
        # the recoverer's retry of an expired lease frees it too
        (rid, rm), = [(id, decode(m)) for id, m in ex.run(b.dequeue(Q, 1, 1, "tok00010")).tasks]  # 1 ms lease
        before = _active(backend, "capped")
        wait_sync(lambda: rid in [i for i, _ in ex.run(b.expired(Q, 10)).tasks], timeout=5)  # its lease expired
        assert ex.run(b.retry(Q, rid, "tok00010", rm.with_(retried=1), 0, recover=True)) > 0
        assert _active(backend, "capped") == before - 1
        info = insp.set_tenant(Q, "capped", concurrency=1)  # lowered below its active tasks: held
        assert not info.ready and info.active == _active(backend, "capped")
        insp.set_tenant(Q, "capped", concurrency=0)  # no limit: back at once
        assert backend.sync.zscore(q.tr, "capped") is not None


def test_an_orphaned_lease_dropped_by_the_recoverer_frees_its_tenant_slot(backend: Any) -> None:
    ex, b = SyncExecutor(backend.sync), Broker()
    q = queue_keys(Q)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", concurrency=1)
        c.enqueue_many([("t", i) for i in range(2)], queue=Q, tenant="a")
        (id, _), = ex.run(b.dequeue(Q, 5, 1, "tok00001")).tasks  # a lease of 1 ms; held at 1
        assert backend.sync.zscore(q.tr, "a") is None
        backend.sync.hdel(q.tasks, id)  # its data deleted by hand while it ran
        wait_sync(lambda: [i for i, _ in ex.run(b.expired(Q, 10)).tasks] == [id], timeout=5)  # its lease expired
        assert ex.run(b.drop(Q, id)) == 1
        assert _active(backend, "a") == 0 and backend.sync.zscore(q.tr, "a") is not None


def test_the_queues_defaults_apply_to_every_tenant_without_its_own(backend: Any) -> None:
    ex, b = SyncExecutor(backend.sync), Broker()
    q = queue_keys(Q)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        d = insp.set_tenant_defaults(Q, concurrency=1, weight=2)
        assert (d.tenant, d.weight, d.concurrency) == ("", 2, 1)
        # its own settings replace the defaults whole (a change starts from those in force)
        assert insp.set_tenant(Q, "vip", concurrency=3).weight == 2
        for t in ("a", "b", "vip"):
            c.enqueue_many([("t", f"{t}{i}") for i in range(4)], queue=Q, tenant=t)
        got = ex.run(b.dequeue(Q, 20, 30_000, "tok00001")).tasks
        per = {t: sum(1 for _, m in got if decode(m).tenant == t) for t in ("a", "b", "vip")}
        assert per == {"a": 1, "b": 1, "vip": 3}, per
        page = {t.tenant: (t.concurrency, t.weight, t.active, t.ready) for t in insp.tenants(Q)}
        assert page == {"a": (1, 2, 1, False), "b": (1, 2, 1, False), "vip": (3, 2, 3, False)}
        assert insp.clear_tenant_defaults(Q).concurrency == 0 and not backend.sync.hexists(q.tn, "d")
        for bad, match in ((dict(weight=0), "weight must be"), (dict(concurrency=-1), "concurrency must be")):
            with pytest.raises(InvalidArgumentError, match=match):
                insp.set_tenant_defaults(Q, **bad)
        # lazily: a held tenant comes back at the end of one of its tasks (no scan of the tenants)
        ex.run_many([b.done(Q, id, "tok00001", decode(m)) for id, m in got])
        assert {t.tenant for t in insp.tenants(Q) if t.ready} == {"a", "b", "vip"}
        assert len([x for (x,) in _take(backend)]) == 3 + 3 + 1


# -- per-tenant rates (stage 3) -------------------------------------------------------------------


def _rated(backend: Any, clock: Any, steps: int, step_s: float, batch: int = 4,
           woken: list[bool] | None = None) -> list[tuple[int, list[str], int]]:
    """Dequeue (and finish) ``batch`` at a time every ``step_s`` of a fake clock, as an idle
    worker that took the wake token: (ms, payloads, the reply's wait in ms) per call; ``woken``
    gets whether each call left a wake token."""
    ex, b = SyncExecutor(backend.sync), Broker(clock)
    out = []
    t0 = clock.t
    for _ in range(steps):
        backend.sync.delete(queue_keys(Q).wake)
        got = ex.run(b.dequeue(Q, batch, 30_000, "tok00001"))
        if woken is not None:
            woken.append(bool(backend.sync.llen(queue_keys(Q).wake)))
        out.append((clock.t - t0, [decode(m).payload for _, m in got.tasks], got.wait_ms))
        ex.run_many([b.done(Q, id, "tok00001", decode(m)) for id, m in got.tasks])
        clock.advance(step_s)
    return out


def test_a_tenants_rate_spaces_its_tasks_while_the_others_go_on(backend: Any) -> None:
    """A rate of 10/s with bursts of 2: two at once, then one every 100 ms, whatever the workers
    ask; the other tenants take the turns it cannot; a worker left with only rate-held tasks is
    told when the next token is due (the reply's wait), not woken in a loop."""
    from asynqpy.core.model.clock import FakeClock

    clock = FakeClock(1_700_000_000_000)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        got = insp.set_tenant(Q, "a", rate="10/s", burst=2)
        assert (got.rate, got.burst) == (10.0, 2)
        c.enqueue_many([("t", f"a{i}") for i in range(6)], queue=Q, tenant="a")
        c.enqueue_many([("t", f"b{i}") for i in range(3)], queue=Q, tenant="b")
        woken: list[bool] = []
        calls = _rated(backend, clock, 9, 0.05, woken=woken)
        assert calls[0][1] == ["a0", "a1", "b0", "b1"]  # the burst
        assert calls[1] == (50, ["b2"], 50)  # a's next token is due at 100 ms
        assert [(ms, x) for ms, x, _ in calls[2:]] == [(100, ["a2"]), (150, []), (200, ["a3"]), (250, []),
                                                      (300, ["a4"]), (350, []), (400, ["a5"])]
        assert woken == [True] + [False] * 8  # b2 is there to take; then nobody woken for the rate's tasks
        assert insp.tenants(Q) == []  # all done
        tn = queue_keys(Q).tn
        assert backend.sync.hexists(tn, "k:a")  # its bucket, not full yet: kept (work coming back now waits)
        clock.advance(1)
        c.enqueue("t", "b3", queue=Q, tenant="b")
        assert [x for _, x, _ in _rated(backend, clock, 1, 0.01)] == [["b3"]]
        assert sorted(backend.sync.hkeys(tn)) == [b"l:a", b"o"]  # full again at the next rest: only settings


def test_a_rate_held_tenant_is_listed_as_held_and_a_removed_rate_lets_it_go_at_once(backend: Any) -> None:
    from asynqpy.core.model.clock import FakeClock

    clock = FakeClock(1_700_000_000_000)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", rate=1)
        c.enqueue_many([("t", f"a{i}") for i in range(3)], queue=Q, tenant="a")
        assert [x for _, x, _ in _rated(backend, clock, 2, 0.01)] == [["a0"], []]
        (a,) = insp.tenants(Q)
        assert (a.pending, a.ready, a.rate) == (2, False, 1.0)  # held by its rate
        assert insp.set_tenant(Q, "a", rate=0).ready  # the rate goes: it takes turns at once
        assert [x for _, x, _ in _rated(backend, clock, 1, 0.01)] == [["a1", "a2"]]


def test_the_queues_default_rate_gives_each_tenant_its_own_bucket(backend: Any) -> None:
    from asynqpy.core.model.clock import FakeClock

    clock = FakeClock(1_700_000_000_000)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        d = insp.set_tenant_defaults(Q, rate="120/m")  # 2/s
        assert d.rate == 2.0
        for t in "ab":
            c.enqueue_many([("t", f"{t}{i}") for i in range(3)], queue=Q, tenant=t)
        calls = _rated(backend, clock, 3, 0.5, batch=10)
        assert [sorted(x) for _, x, _ in calls] == [["a0", "b0"], ["a1", "b1"], ["a2", "b2"]]
        insp.clear_tenant_defaults(Q)


def test_bad_rates_are_refused_and_nothing_changes(backend: Any) -> None:
    with Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", weight=2)
        for bad in ({"rate": "fast"}, {"rate": -1}, {"rate": "5/s", "burst": 0}, {"burst": 1.5}):
            with pytest.raises(InvalidArgumentError):
                insp.set_tenant(Q, "a", **bad)  # type: ignore[arg-type]
        assert backend.sync.hget(queue_keys(Q).tn, "l:a") == b"2 0 0"


def test_cli_sets_and_shows_a_tenants_rate(redis_url: str) -> None:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    def run(*args: str) -> Any:
        return CliRunner().invoke(main, [*args, "--redis-url", redis_url])

    res = run("queue", "tenant", Q, "acme", "--rate", "50/s", "--burst", "5")
    assert res.exit_code == 0 and "rate 50/s (burst 5)" in res.stdout, res.output
    res = run("queue", "tenants", Q, "--rate", "10/s")
    assert res.exit_code == 0 and "tenants' defaults weight 1, concurrency none, rate 10/s" in res.stdout, res.output
    res = run("queue", "tenant", Q, "acme", "--rate", "soon")
    assert res.exit_code == 2 and res.stderr.startswith("asynqpy: error: ") and len(res.stderr.splitlines()) == 1
    assert run("queue", "tenant", Q, "acme", "--rate", "0").stdout.count("rate") == 0


def test_a_worker_that_comes_late_for_a_tenants_task_does_not_slow_its_rate(backend: Any) -> None:
    """The schedule keeps up to half an interval (at most 100 ms) a dequeue came late by: at 10/s
    a task taken 30 ms late leaves the next one due 100 ms after the first's due time, not after
    the late take (otherwise dequeues that fall between due times cost the rate: 43/s for 50/s in
    bench/tenants.py --rate); a tenant starting afresh gets no such credit."""
    from asynqpy.core.model.clock import FakeClock

    clock = FakeClock(1_700_000_000_000)
    ex, b = SyncExecutor(backend.sync), Broker(clock)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", rate=10)
        c.enqueue_many([("t", f"a{i}") for i in range(4)], queue=Q, tenant="a")
        started = []
        for at in (0, 50, 130, 190, 200):  # ms after the first
            clock.t = 1_700_000_000_000 + at
            got = ex.run(b.dequeue(Q, 1, 30_000, "tok00001"))
            started += [at for _ in got.tasks]
        assert started == [0, 130, 200]  # 130: 30 ms late for its due time 100; the next at 200


# -- issue 42: a rate hold has its own key; held tasks spend nothing of their tenant; passes rebased --


def test_a_tenant_held_by_the_default_rate_goes_at_once_when_the_defaults_are_cleared(backend: Any) -> None:
    """Issue 42 defect 1: a tenant waiting on the queue's default rate (held in ``tw``, out of the
    ring) takes its turns again at the next dequeue once the defaults are cleared, or their rate set
    to 0: a worker is woken, and no worker is ever told to look again in 1 ms."""
    from asynqpy.core.model.clock import FakeClock

    clock = FakeClock(1_700_000_000_000)
    q = queue_keys(Q)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        for n, clear in enumerate((lambda: insp.clear_tenant_defaults(Q), lambda: insp.set_tenant_defaults(Q, rate=0))):
            insp.set_tenant_defaults(Q, rate=1)
            c.enqueue_many([("t", f"a{n}{i}") for i in range(3)], queue=Q, tenant="a")
            calls = _rated(backend, clock, 2, 0.01)
            assert [x for _, x, _ in calls] == [[f"a{n}0"], []]
            assert calls[1][2] >= 900  # told when its next task is due, not 1 ms
            assert backend.sync.zscore(q.tw, "a") is not None and backend.sync.zscore(q.tr, "a") is None
            assert not insp.tenants(Q)[0].ready
            backend.sync.delete(q.wake)
            clear()
            assert backend.sync.llen(q.wake) == 1  # a worker comes for it
            assert [x for _, x, _ in _rated(backend, clock, 1, 0.01)] == [[f"a{n}1", f"a{n}2"]]
            assert _tenant_keys_left(backend) == [] and not backend.sync.exists(q.tw)
            clock.advance(2)


def test_a_rate_held_tenant_whose_tasks_left_is_not_put_back_in_the_ring(backend: Any) -> None:
    """Found by fuzzing the plus model (2026-12-01): a tenant held by its rate (in ``tw``) whose
    pending tasks left meanwhile (deleted by an operator, dropped by a cap) was put back in the
    ready ring by the next dequeue once its time came, with no task: counted by the wake-up's
    check and keeping the queue's tenant state, until a dequeue met it. It now just leaves ``tw``."""
    from asynqpy.core.model.clock import FakeClock

    clock = FakeClock(1_700_000_000_000)
    q = queue_keys(Q)
    ex, b = SyncExecutor(backend.sync), Broker(clock)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant_defaults(Q, rate=1)
        c.enqueue("t", "b0", queue=Q, tenant="b")
        b1 = c.enqueue("t", "b1", queue=Q, tenant="b")
        got = ex.run(b.dequeue(Q, 4, 30_000, "tok00001"))
        assert [decode(m).payload for _, m in got.tasks] == ["b0"]
        assert backend.sync.zscore(q.tw, "b") is not None  # held by its rate, b1 waiting
        insp.delete_task(Q, b1.id)
        clock.advance(5)  # its next task would be due now
        c.enqueue("t", "a0", queue=Q, tenant="a")
        got = ex.run(b.dequeue(Q, 1, 30_000, "tok00001"))
        assert [decode(m).payload for _, m in got.tasks] == ["a0"]
        assert backend.sync.zscore(q.tr, "b") is None and backend.sync.zscore(q.tw, "b") is None


def test_held_tasks_spend_no_token_slot_or_turn_of_their_tenant(backend: Any) -> None:
    """Issue 42 defect 5: tasks the dequeue holds (a blocked type, a version gate) never start, so
    they take nothing of their tenant: with tenant a at 1/s and concurrency 1, three held tasks
    ahead of its invoice, the invoice starts at the first dequeue (one call, count 1), and its next
    task is due one interval later, not four."""
    from asynqpy.core.model.clock import FakeClock

    clock = FakeClock(1_700_000_000_000)
    q = queue_keys(Q)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", rate=1, concurrency=1)
        insp.block_type(Q, "report")
        c.enqueue_many([("report", i) for i in range(2)], queue=Q, tenant="a")
        c.enqueue("t", "gated", queue=Q, tenant="a", min_worker_version="2")
        c.enqueue("t", "inv", queue=Q, tenant="a")
        c.enqueue("t", "b0", queue=Q, tenant="b")
        ex, b = SyncExecutor(backend.sync), Broker(clock)
        got = ex.run(b.dequeue(Q, 1, 30_000, "tok00001"))
        assert [decode(m).payload for _, m in got.tasks] == ["inv"]
        assert len(insp.list_tasks(Q, TaskState.SCHEDULED)) == 3  # held
        assert backend.sync.hgetall(q.ta) == {got.tasks[0][0].encode(): b"a"}  # one slot: the invoice's
        assert backend.sync.hget(q.tn, "a:a") == b"1"
        c.enqueue("t", "inv2", queue=Q, tenant="a")
        ex.run(b.done(Q, got.tasks[0][0], "tok00001", decode(got.tasks[0][1])))
        calls = _rated(backend, clock, 3, 0.5)
        assert calls[0][1] == ["b0"] and calls[0][2] >= 900  # a's next task: one interval after the invoice
        assert [x for _, x, _ in calls[1:]] == [[], ["inv2"]]


def test_passes_that_grow_large_are_rebased_and_every_tenant_is_served(backend: Any) -> None:
    """Issue 42 defect 6: the ready ring holds passes only (a rate hold is ``tw``), and the dequeue
    rebases them (each, and V, less V) once V reaches PASS_REBASE: a queue whose tenant work never
    ran dry for ~10^12 turns (written here as it would be) serves every tenant as before, and the
    passes and V are small again (the guard)."""
    from asynqpy.core.tenants.plans import PASS_REBASE

    q = queue_keys(Q)
    with Client(backend.sync) as c:
        c.enqueue_many([("t", f"a{i}") for i in range(4)], queue=Q, tenant="a")
        backend.sync.hset(q.tn, "v", "999999999998000")
        backend.sync.zadd(q.tr, {"a": 999999999998000})
        assert _take(backend, drain=False, limit=2) == [["a0"], ["a1"]]
        assert float(backend.sync.hget(q.tn, "v") or 0) < PASS_REBASE
        assert all(score < PASS_REBASE for _, score in backend.sync.zrange(q.tr, 0, -1, withscores=True))
        c.enqueue_many([("t", f"g{i}") for i in range(2)], queue=Q, tenant="g")  # enters at V
        assert _take(backend) == [["g0"], ["a2"], ["g1"], ["a3"]]
        assert _tenant_keys_left(backend) == []
