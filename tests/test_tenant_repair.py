"""The consistency sweep repairs a queue's tenant bookkeeping after its keys were removed or edited
by hand (issue 32 stage 4; lua/tenant_fix.lua, the ``tasks`` part's lua/reconcile.lua): a
slot counted for a task that is no longer active is freed, a tenant with pending tasks that no
dequeue would pick is put back in the ready ring, a count raised by hand that holds a tenant at its
concurrency is corrected, an active tenant task missing from ``ta`` is counted again. Nothing
already queued is lost, and a sweep of a sound queue repairs nothing. On fakeredis, redis-server
and the Cluster."""

from __future__ import annotations

from typing import Any

from helpers import serve_until

from asynqpy import Client, Inspector, ServeMux, Task
from asynqpy.core.model.codec import decode
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

Q = "tfix"


def _sweep(ex: SyncExecutor, b: Broker, mode: str, count: int = 2) -> list[tuple[str, str]]:
    """Every step of one pass of a tenant part, ``count`` at a time: what it repaired."""
    cursor, fixed = "0", []
    for _ in range(1000):
        cursor, got = ex.run(b.tenant_fix(Q, mode, cursor, count))
        fixed += got
        if cursor == "0":
            return fixed
    raise AssertionError("the pass never ended")


def _reconcile(ex: SyncExecutor, b: Broker) -> list[tuple[str, str]]:
    cursor, fixed = "0", []
    for _ in range(1000):
        cursor, got = ex.run(b.reconcile(Q, cursor, 5))
        fixed += got
        if cursor == "0":
            return fixed
    raise AssertionError("the pass never ended")


def _drain(ex: SyncExecutor, b: Broker) -> list[str]:
    """Dequeue and finish every task that can be taken now: their ids."""
    ids: list[str] = []
    for _ in range(100):
        got = ex.run(b.dequeue(Q, 4, 30_000, "tok00002"))
        if not got.tasks:
            return ids
        ids += [id for id, _ in got.tasks]
        for id, m in got.tasks:
            ex.run(b.done(Q, id, "tok00002", decode(m)))
    raise AssertionError("the queue never emptied")


def test_a_sound_queue_needs_no_repair(backend: Any) -> None:
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", concurrency=1)
        for t in ("a", "a", "b", "c", "c"):
            c.enqueue("t", t, queue=Q, tenant=t)
        c.enqueue("t", "plain", queue=Q)
        insp.set_tenant(Q, "c", paused=True)
        ex.run(b.dequeue(Q, 3, 30_000, "tok00002"))  # a (then held at its limit), b and the plain task run
        assert _sweep(ex, b, "active") == [] and _sweep(ex, b, "ring") == [] and _reconcile(ex, b) == []


def test_a_slot_counted_for_a_task_gone_is_freed(backend: Any) -> None:
    ex, b, q = SyncExecutor(backend.sync), Broker(), queue_keys(Q)
    r = backend.sync
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", concurrency=1)
        first = c.enqueue("t", 1, queue=Q, tenant="a").id
        second = c.enqueue("t", 2, queue=Q, tenant="a").id
        assert [id for id, _ in ex.run(b.dequeue(Q, 4, 30_000, "tok00002")).tasks] == [first]
        # removed by hand while it ran: its slot would stay taken (no lease left for the recoverer)
        r.hdel(q.tasks, first)
        r.zrem(q.lease, first)
        assert _drain(ex, b) == []  # the tenant is held at its limit by a task that is gone
        fixed = _sweep(ex, b, "active")
        assert [id for id, _ in fixed] == [first] and "gone: slot freed" in fixed[0][1]
        assert insp.tenants(Q)[0].active == 0
        assert _drain(ex, b) == [second]  # nothing queued was lost
        assert _sweep(ex, b, "active") == []


def test_a_tenant_left_out_of_the_ring_is_put_back(backend: Any) -> None:
    ex, b, q = SyncExecutor(backend.sync), Broker(), queue_keys(Q)
    r = backend.sync
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        ids = {t: [c.enqueue("t", t, queue=Q, tenant=t).id for _ in range(2)] for t in ("a", "b", "c", "d", "e")}
        insp.set_tenant(Q, "e", paused=True)
        r.zrem(q.tr, "a", "c")  # by hand: a and c would never be picked again
        assert sorted(_drain(ex, b)) == sorted(ids["b"] + ids["d"])
        fixed = _sweep(ex, b, "ring")  # two tenants a step: the walk's cursor goes on by name
        assert sorted(name for name, _ in fixed) == ["a", "c"]  # e is paused: left out on purpose
        assert sorted(_drain(ex, b)) == sorted(ids["a"] + ids["c"])
        insp.set_tenant(Q, "e", paused=False)
        assert sorted(_drain(ex, b)) == sorted(ids["e"])


def test_a_count_raised_by_hand_is_corrected(backend: Any) -> None:
    ex, b, q = SyncExecutor(backend.sync), Broker(), queue_keys(Q)
    r = backend.sync
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", concurrency=2)
        ids = [c.enqueue("t", i, queue=Q, tenant="a").id for i in range(3)]
        got = ex.run(b.dequeue(Q, 1, 30_000, "tok00002")).tasks
        assert [id for id, _ in got] == ids[:1]
        r.hset(q.tn, "a:a", 5)  # by hand: five counted, one runs
        r.zrem(q.tr, "a")
        assert _drain(ex, b) == []
        fixed = _sweep(ex, b, "ring")
        assert fixed == [("a", "counted 5 active task(s) but 1 run: count corrected")]
        assert insp.tenants(Q)[0].active == 1
        assert [id for id, _ in ex.run(b.dequeue(Q, 4, 30_000, "tok00002")).tasks] == ids[1:2]  # its limit holds
        ex.run(b.done(Q, got[0][0], "tok00002", decode(got[0][1])))
        assert _drain(ex, b) == ids[2:]


def test_an_active_tenant_task_missing_from_ta_is_counted_again(backend: Any) -> None:
    ex, b, q = SyncExecutor(backend.sync), Broker(), queue_keys(Q)
    r = backend.sync
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "a", concurrency=1)
        ids = [c.enqueue("t", i, queue=Q, tenant="a").id for i in range(2)]
        (id, m), = ex.run(b.dequeue(Q, 1, 30_000, "tok00002")).tasks
        r.delete(q.ta)  # by hand: the count stays, the entry is gone
        fixed = _reconcile(ex, b)
        assert fixed == [(id, "active task of tenant a not counted: entry restored")]
        assert r.hget(q.ta, id) == b"a"
        ex.run(b.done(Q, id, "tok00002", decode(m)))  # its end frees the slot: the next runs
        assert _drain(ex, b) == ids[1:]
        assert not r.exists(q.ta) and insp.tenants(Q) == []


def test_a_server_s_sweep_runs_the_tenant_parts(backend: Any) -> None:
    """The janitor's sweep (every ``reconcile_interval``) runs both parts: a running server gets a
    tenant left out of the ring and one held by a slot of a task gone back to work."""
    q, r = queue_keys(Q), backend.sync
    ran: list[Any] = []
    mux = ServeMux()

    async def handle(task: Task) -> None:
        ran.append(task.payload)

    mux.handle("t", handle)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant(Q, "held", concurrency=1)
        gone = c.enqueue("t", "gone", queue=Q, tenant="held").id
        ex, b = SyncExecutor(backend.sync), Broker()
        ex.run(b.dequeue(Q, 1, 30_000, "tok00002"))
        r.hdel(q.tasks, gone)  # by hand, while it ran
        r.zrem(q.lease, gone)
        c.enqueue("t", "after-gone", queue=Q, tenant="held")
        c.enqueue("t", "lost-turn", queue=Q, tenant="out")
        r.zrem(q.tr, "out")  # by hand
        serve_until(backend, mux, lambda: len(ran) == 2, queues=[Q], reconcile_interval=0.2)
        assert sorted(ran) == ["after-gone", "lost-turn"]
        assert not r.exists(q.ta)


def test_a_tenant_held_by_a_rate_it_no_longer_has_is_put_back(backend: Any) -> None:
    """Issue 42 defect 1: a tenant waiting on the queue's default rate (``tw``) when the defaults
    are cleared is put back in the ring by the sweep's ring part too (as by the next dequeue); one
    held by a rate still in force is left alone."""
    ex, b, q = SyncExecutor(backend.sync), Broker(), queue_keys(Q)
    r = backend.sync
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_tenant_defaults(Q, rate="1/m")
        insp.set_tenant(Q, "own", rate="1/m")
        ids = {t: [c.enqueue("t", t, queue=Q, tenant=t).id for _ in range(2)] for t in ("a", "own")}
        assert sorted(_drain(ex, b)) == sorted([ids["a"][0], ids["own"][0]])
        assert sorted(r.zrange(q.tw, 0, -1)) == [b"a", b"own"]  # held by their rates
        assert _sweep(ex, b, "ring") == []  # both rates in force: nothing to repair
        insp.clear_tenant_defaults(Q)
        assert _sweep(ex, b, "ring") == [("a", "held by a rate it no longer has: put back in the ready ring")]
        assert r.zscore(q.tr, "a") is not None and r.zrange(q.tw, 0, -1) == [b"own"]
        assert _drain(ex, b) == ids["a"][1:]


def test_a_pass_far_past_the_virtual_time_is_put_back_at_it(backend: Any) -> None:
    """Issue 42 defect 6, on an upgrade: the rate band of older versions left a rate-held tenant in
    the ring at 10^15 + its due time; no turn leaves a pass PASS_REBASE past the virtual time, so
    the ring part puts such a tenant back at V (otherwise it would wait until every other tenant's
    pass reached it)."""
    ex, b, q = SyncExecutor(backend.sync), Broker(), queue_keys(Q)
    r = backend.sync
    with Client(backend.sync) as c:
        ids = {t: [c.enqueue("t", t, queue=Q, tenant=t).id for _ in range(2)] for t in ("a", "b")}
        r.zadd(q.tr, {"a": 10**15 + 1_700_000_000_000})  # as an older version left it
        assert _sweep(ex, b, "ring") == [
            ("a", "its pass was far past the virtual time (an older version's rate hold): put back at it")]
        assert r.zscore(q.tr, "a") == float(r.hget(q.tn, "v") or 0)
        assert _sweep(ex, b, "ring") == []
        got = ex.run(b.dequeue(Q, 2, 30_000, "tok00002")).tasks
        assert sorted(id for id, _ in got) == sorted([ids["a"][0], ids["b"][0]])  # turns again
