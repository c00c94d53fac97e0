"""The lifecycle event stream: every transition of a task appends an event to its queue's stream
(enqueued, scheduled, active, progress, completed, retry, archived, deleted, cancelled,
lease_expired); Inspector.events reads them (since a time or an event, and following); a queue's
stream can be capped or switched off. On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest
from helpers import serving, stats, until

from asynqpy import AsyncClient, AsyncInspector, Client, Inspector, InvalidArgumentError, ServeMux, SkipRetry, Task
from asynqpy.core.model.codec import Message, decode
from asynqpy.core.results import events as ev
from asynqpy.core.spine.broker import Broker, Done
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

Q = "ev"


def kinds(ins: Inspector, queue: str = Q, **kw: Any) -> list[tuple[str, str, int | None]]:
    return [(e.event, e.task_id, e.attempt) for e in ins.events(queue, **kw)]


def test_a_tasks_life_in_events(backend: Any) -> None:
    mux = ServeMux()

    @mux.handle("ok")
    async def ok(task: Task) -> str:
        task.progress({"half": True})
        await asyncio.sleep(0.25)  # the progress write goes out (at most one per 0.2 s)
        return "done"

    @mux.handle("flaky")
    async def flaky(task: Task) -> None:
        if task.retry_count == 0:
            raise RuntimeError("first try fails\nsecond line")

    @mux.handle("dead")
    async def dead(task: Task) -> None:
        raise ValueError("no")

    Inspector(backend.sync).set_events(Q, 10_000, active=True)  # (by default only while a reader follows)

    async def main() -> None:
        async with AsyncClient(backend.new_async()) as c, serving(backend.new_async(), mux, queues=[Q]):
            assert await c.call("ok", queue=Q, task_id="t-ok", timeout=10) == "done"
            await c.enqueue("flaky", queue=Q, task_id="t-flaky", retry_delay=0)
            await c.enqueue("dead", queue=Q, task_id="t-dead", max_retry=0)
            await until(lambda: stats(backend, Q).processed == 4)

    asyncio.run(main())
    ins = Inspector(backend.sync)
    by_task: dict[str, list[tuple[str, int | None]]] = {}
    for e in ins.events(Q):
        by_task.setdefault(e.task_id, []).append((e.event, e.attempt))
        assert e.queue == Q and e.time.year >= 2024
    assert by_task["t-ok"] == [("enqueued", None), ("active", None), ("progress", None), ("completed", 1)]
    assert by_task["t-flaky"] == [("enqueued", None), ("active", None), ("retry", 1), ("active", None),
                                  ("completed", 2)]
    assert by_task["t-dead"] == [("enqueued", None), ("active", None), ("archived", 1)]
    events = list(ins.events(Q))
    progress = next(e for e in events if e.event == "progress")
    assert progress.value == {"half": True} and progress.type == "ok"
    retry = next(e for e in events if e.event == "retry")
    assert retry.error == "RuntimeError: first try fails" and retry.due is not None and retry.type == "flaky"
    assert next(e for e in events if e.event == "archived").error == "ValueError: no"


def test_operator_events_lease_expiry_and_reading_from_a_point(backend: Any) -> None:
    with Client(backend.sync) as c:
        c.enqueue("s", queue=Q, task_id="later", process_in=3600)
        c.enqueue_many([("b", i) for i in range(3)], queue=Q)
    ins = Inspector(backend.sync)
    ins.set_events(Q, 10_000, active=True)
    first = list(ins.events(Q))
    assert [e.event for e in first] == ["scheduled", "enqueued", "enqueued", "enqueued"]
    assert first[0].due is not None and first[0].type == "s" and {e.type for e in first[1:]} == {"b"}
    ins.delete_task(Q, "later")
    b = Broker()
    x = SyncExecutor(backend.sync)
    taken = x.run(b.dequeue(Q, 1, 1, "tok00001")).tasks  # a worker that dies: its lease lapses at once
    time.sleep(0.01)
    id = taken[0][0]
    x.run(b.retry(Q, id, "tok00001", Message("b", 0, retried=1, last_error="lease expired"), 0, recover=True))
    after = list(ins.events(Q, since=first[-1].stream_id))  # resumes after the last event read
    assert [(e.event, e.task_id) for e in after] == [("deleted", "later"), ("active", id), ("lease_expired", id),
                                                       ("retry", id)]
    assert list(ins.events(Q, since=time.time() + 60)) == []
    for bad in ("yesterday", -1, True):
        with pytest.raises(InvalidArgumentError):
            list(ins.events(Q, since=bad))  # type: ignore[arg-type]


def test_switching_a_queues_stream_off_and_capping_it(backend: Any) -> None:
    ins = Inspector(backend.sync)
    with Client(backend.sync) as c:
        c.enqueue("t", queue=Q)
        assert ins.events_max_len(Q) == 10_000
        ins.set_events(Q, 0)
        assert not backend.sync.exists(queue_keys(Q).events) and ins.events_max_len(Q) == 0
        c.enqueue("t", queue=Q)
        assert list(ins.events(Q)) == []
        ins.set_events(Q, 100)
        c.enqueue_many([("t" if i % 2 else "u", i) for i in range(1000)], queue=Q)  # mixed: an entry each
    assert 100 <= backend.sync.xlen(queue_keys(Q).events) < 1000  # MAXLEN ~: whole nodes are trimmed
    assert stats(backend, Q).pending == 1002  # nothing queued is lost to it
    for bad in (-1, "10", 1.5):
        with pytest.raises(InvalidArgumentError):
            ins.set_events(Q, bad)  # type: ignore[arg-type]


def test_following_events_as_they_happen(backend: Any) -> None:
    async def main() -> None:
        ins = AsyncInspector(backend.new_async())
        got: list[str] = []

        async def follow() -> None:
            async for e in ins.events(Q, follow=True):
                got.append(f"{e.event}:{e.task_id}")
                if len(got) == 3:
                    return

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.2)  # following, with nothing to read yet
        async with AsyncClient(backend.new_async()) as c:
            for i in range(3):
                await c.enqueue("t", queue=Q, task_id=f"f{i}")
        await asyncio.wait_for(follower, 10)
        assert got == ["enqueued:f0", "enqueued:f1", "enqueued:f2"]
        await ins.close()

    asyncio.run(main())


def test_an_event_about_garbage_written_by_hand_has_no_type_and_no_error(backend: Any) -> None:
    """The type is read from the message's first bytes: a truncated or hand-written value must
    give an empty type, not fail the operator's script (found by the inspector fuzz test)."""
    ins = Inspector(backend.sync)
    k = queue_keys(Q)
    with Client(backend.sync) as c:
        c.enqueue("t", queue=Q)
    for i, value in enumerate([b"p", b"p\x91", b"p\x91\xd9", b"p\x91\xda\x01", b"p\xff\xff", b"p\x91\xa5ab"]):
        id = f"bad{i}"
        backend.sync.hset(k.tasks, id, value)
        backend.sync.lpush(k.pending, id)
        ins.delete_task(Q, id)
    deleted = [e for e in ins.events(Q) if e.event == "deleted"]
    assert [e.task_id for e in deleted] == [f"bad{i}" for i in range(6)]
    assert [e.type for e in deleted] == ["", "", "", "", "", "ab"]


def test_a_batch_is_one_stream_entry_read_as_an_event_per_task(backend: Any) -> None:
    """enqueue_many with generated ids of one type writes one entry for the batch (the cheap path
    of issue 14); readers, following or not, still see one 'enqueued' event per task, in order.
    Mixed types or caller-chosen ids keep an entry per task."""
    ins = Inspector(backend.sync)
    with Client(backend.sync) as c:
        infos = c.enqueue_many([("t", i) for i in range(50)], queue=Q)
        c.enqueue_many([("a", 1), ("b", 2)], queue=Q)
        c.enqueue_many([("t", 1, {"task_id": "x1"}), ("t", 2, {"task_id": "x2"})], queue=Q)
    assert backend.sync.xlen(queue_keys(Q).events) == 1 + 2 + 2
    got = list(ins.events(Q))
    assert [e.task_id for e in got[:50]] == [i.id for i in infos]
    assert {e.event for e in got} == {"enqueued"} and {e.type for e in got[:50]} == {"t"}
    assert [(e.type, e.task_id) for e in got[50:]][2:] == [("t", "x1"), ("t", "x2")]
    assert [e.type for e in got[50:52]] == ["a", "b"]
    assert len({e.stream_id for e in got[:50]}) == 1
    # following from before the batch sees the whole batch once
    last = got[-1].stream_id
    with Client(backend.sync) as c:
        more = c.enqueue_many([("t", i) for i in range(7)], queue=Q)
    assert [e.task_id for e in list(ins.events(Q, since=last))] == [i.id for i in more]


def test_a_batch_of_finished_tasks_is_one_entry_and_active_events_only_when_asked(backend: Any) -> None:
    """The worker's batched acknowledgement (done) writes one entry per (type, attempt) for the
    batch, read as a 'completed' event per task with its attempt; a dequeue writes no 'active'
    event unless a reader follows the stream or the queue asks for them always; a keyed task's end
    comes before its key's next task's event."""
    b, x, ins, k = Broker(), SyncExecutor(backend.sync), Inspector(backend.sync), queue_keys(Q)
    with Client(backend.sync) as c:
        c.enqueue_many([("t", i, {"task_id": f"d{i}"}) for i in range(4)] + [("u", 9, {"task_id": "e0"})],
                       queue=Q)
    start = backend.sync.xlen(k.events)
    taken = x.run(b.dequeue(Q, 5, 60_000, "tok00001")).tasks
    assert backend.sync.xlen(k.events) == start  # no active event: nobody asked
    msgs = {id: Message("t" if id.startswith("d") else "u", 0) for id, _ in taken}
    x.run(b.done_many(Q, [Done(id, "tok00001", msgs[id]) for id, _ in taken]))
    assert backend.sync.xlen(k.events) == start + 2  # one entry per type
    done = [e for e in ins.events(Q) if e.event == "completed"]
    assert sorted((e.task_id, e.type, e.attempt) for e in done) == [
        ("d0", "t", 1), ("d1", "t", 1), ("d2", "t", 1), ("d3", "t", 1), ("e0", "u", 1)]
    # a reader following the stream asks for active events (the conf field 'followed')
    reader = ev.Reader(Q, since=time.time() + 60, follow=True)
    assert reader.feed(x.run(reader.call())) == [] and not reader.following
    with Client(backend.sync) as c:
        c.enqueue("t", queue=Q, task_id="f1")
        c.enqueue("t", queue=Q, task_id="k1", key="acct")
        c.enqueue("t", queue=Q, task_id="k2", key="acct")
    taken = x.run(b.dequeue(Q, 5, 60_000, "tok00002")).tasks
    assert [e.event for e in ins.events(Q) if e.task_id in ("f1", "k1")][-2:] == ["active", "active"]
    x.run(b.done_many(Q, [Done("k1", "tok00002", decode(next(m for id, m in taken if id == "k1")))]))
    tail = [(e.event, e.task_id) for e in ins.events(Q)][-2:]
    assert tail == [("completed", "k1"), ("enqueued", "k2")]  # the order they happened in


def test_the_cap_counts_events_so_a_batch_fed_stream_stays_small(backend: Any) -> None:
    """A cap of 200 events: batches of 100 tasks (one entry each) keep about 200 events, not 200
    entries of 100 (20 000 events); with real Redis, MEMORY USAGE shows the bound."""
    ins, k = Inspector(backend.sync), queue_keys(Q)
    ins.set_events(Q, 200)
    with Client(backend.sync) as c:
        for _ in range(30):
            c.enqueue_many([("t", i) for i in range(100)], queue=Q)
    kept = len(list(ins.events(Q)))
    assert 200 <= kept <= 600, kept  # MAXLEN ~ cap/n: whole nodes trimmed
    if backend.kind != "fake":
        assert backend.sync.memory_usage(k.events, samples=0) < 48_000  # (200 entries of 100 ids: ~500 KB)


def test_a_stream_mixing_single_and_batch_entries_keeps_its_cap_of_events(backend: Any) -> None:
    """Issue 42: the cap counts events whatever the mix of entries. Before, an entry of n events
    was added with MAXLEN ~ cap / n, so a batch's entry trimmed a mixed stream to cap / n entries:
    a queue fed single tasks and batches kept a sixth of its cap (the oldest event first gone).
    Now every event is kept up to the cap, then the newest cap events (at most cap / 100 and
    one entry more)."""
    ins = Inspector(backend.sync)
    ins.set_events(Q, 1000)
    singles = [("t" if i % 2 else "u", i) for i in range(150)]  # (types alternate: an entry each)
    with Client(backend.sync) as c:
        c.enqueue("first", queue=Q, task_id="first")
        for _ in range(4):
            c.enqueue_many([("b", i) for i in range(50)], queue=Q)  # one entry of 50 events
            c.enqueue_many(singles, queue=Q)
    events = list(ins.events(Q))
    assert len(events) == 801 and events[0].task_id == "first"  # under the cap: every event kept
    with Client(backend.sync) as c:
        for i in range(5):
            c.enqueue_many(singles, queue=Q)
            c.enqueue_many([("b", j) for j in range(50)], queue=Q)
            c.enqueue("s", queue=Q, task_id=f"last{i}")
    events = list(ins.events(Q))
    assert 1000 <= len(events) <= 1000 + 10 + 50, len(events)  # the cap, and no more than a trim's slack
    assert events[-1].task_id == "last4" and "first" not in {e.task_id for e in events}
    assert int(backend.sync.hget(queue_keys(Q).conf, "kept")) == len(events)  # the count is the stream's
    b, x = Broker(), SyncExecutor(backend.sync)  # a worker's batched ends (done.lua) and dequeues count too
    ins.set_events(Q, 1000, active=True)
    for _ in range(4):
        taken = x.run(b.dequeue(Q, 100, 60_000, "tok00001")).tasks
        x.run(b.done_many(Q, [Done(id, "tok00001", decode(m)) for id, m in taken]))
    events = list(ins.events(Q))
    assert 1000 <= len(events) <= 1060 and events[-1].event == "completed", (len(events), events[-1])
    assert int(backend.sync.hget(queue_keys(Q).conf, "kept")) == len(events)
    ins.set_events(Q, 100, active=False)  # a lowered cap is reached within a few writes
    with Client(backend.sync) as c:
        for i in range(3):
            c.enqueue("s", queue=Q)
    assert 100 <= len(list(ins.events(Q))) <= 160
    backend.sync.delete(queue_keys(Q).events)  # deleted by hand: the count finds its way back
    with Client(backend.sync) as c:
        for i in range(120):
            c.enqueue_many(singles[:2], queue=Q)
    assert 100 <= len(list(ins.events(Q))) <= 160


def test_a_handler_sees_its_tenant_and_the_tenant_is_on_its_events(backend: Any) -> None:
    """Issue 42 #23: ``Task.tenant`` (and ``current_task().tenant``) is the task's tenant, and the
    events of its enqueue and of its end carry it (``TaskEvent.tenant``), in single entries and in
    batched ones (a batch's entry is one tenant's: tasks of two tenants never share one)."""
    from asynqpy import current_task

    seen: dict[str, tuple[str, str]] = {}
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        cur = current_task()
        seen[task.id] = (task.tenant, cur.tenant if cur else "?")

    @mux.handle("bad")
    async def bad(task: Task) -> None:
        raise SkipRetry("no")

    with Client(backend.sync) as c:
        c.enqueue("t", 1, queue=Q, task_id="a1", tenant="acme")
        c.enqueue("t", 2, queue=Q, task_id="n1")
        c.enqueue_many([("t", i) for i in range(5)], queue=Q, tenant="acme")  # one entry: acme's
        c.enqueue_many([("t", i) for i in range(5)], queue=Q, tenant="globex")
        c.enqueue("bad", queue=Q, task_id="b1", tenant="globex")
        c.enqueue("t", queue=Q, task_id="k1", tenant="acme", key="k")
        c.enqueue("t", queue=Q, task_id="k2", tenant="acme", key="k")  # blocked behind k1
        c.enqueue("t", queue=Q, task_id="s1", tenant="globex", process_in=0.05)  # scheduled, then due
        c.enqueue("t", queue=Q, task_id="w1", tenant="acme", after=["a1"])  # a workflow child

    async def main() -> None:
        async with serving(backend.new_async(), mux, queues=[Q], concurrency=20):
            await until(lambda: len(seen) == 16 and stats(backend, Q).archived == 1 and stats(backend, Q).active == 0)

    asyncio.run(main())
    assert seen["a1"] == ("acme", "acme") and seen["n1"] == ("", "") and seen["k2"] == ("acme", "acme")
    assert sorted({v for v in seen.values()}) == [("", ""), ("acme", "acme"), ("globex", "globex")]
    assert seen["s1"] == ("globex", "globex") and seen["w1"] == ("acme", "acme")
    tenant_of = {"a1": "acme", "n1": "", "b1": "globex", "k1": "acme", "k2": "acme", "s1": "globex", "w1": "acme"}
    events = list(Inspector(backend.sync).events(Q))
    for e in events:
        want = tenant_of.get(e.task_id)
        if want is None:  # an enqueue_many task: its tenant from its handler's view
            want = seen[e.task_id][0]
        assert e.tenant == want, e
    kinds = {(e.task_id, e.event) for e in events}
    assert {("a1", "enqueued"), ("a1", "completed"), ("b1", "archived"), ("k2", "blocked"),
            ("k2", "enqueued"), ("k2", "completed"), ("s1", "scheduled"), ("w1", "enqueued")} <= kinds


def test_a_batched_acknowledgement_names_each_tasks_tenant_from_ta_or_its_message(backend: Any) -> None:
    """The batched acknowledgement (lua/includes/ack.lua) takes its plain items' tenants from
    ``ta`` (id -> tenant, written by the dequeue, read once for the tenants' slots anyway) and
    walks a message for its tenant only when ``ta`` has none (a task taken before ``ta`` held it,
    an entry a repair has not put back yet): the event names the tenant either way, a task without
    one names none, and the slots read from ``ta`` are freed."""
    b, x, q = Broker(), SyncExecutor(backend.sync), queue_keys(Q)
    with Client(backend.sync) as c:
        c.enqueue_many([("t", i) for i in range(3)], queue=Q, tenant="acme")
        c.enqueue("t", 9, queue=Q, task_id="plain1")
        c.enqueue_many([("t", i) for i in range(3)], queue=Q, tenant="globex")
    taken = x.run(b.dequeue(Q, 10, 60_000, "tok00001")).tasks
    assert len(taken) == 7
    tenant_of = {id: decode(m).tenant for id, m in taken}
    held = {k.decode(): v.decode() for k, v in backend.sync.hgetall(q.ta).items()}
    assert held == {id: t for id, t in tenant_of.items() if t}  # (the dequeue wrote each tenant task's)
    lost = next(id for id, t in tenant_of.items() if t == "globex")
    backend.sync.hdel(q.ta, lost)  # its entry gone: its tenant comes from its message
    # (plain items, as a worker's no-op successes: no progress written, no result, lock or key)
    replies = x.run(b.done_many(Q, [Done(id, "tok00001", decode(m), progressed=False) for id, m in taken]))
    assert all(not isinstance(r, Exception) for r in replies)
    ended = {e.task_id: e.tenant for e in Inspector(backend.sync).events(Q) if e.event == "completed"}
    assert ended == tenant_of and ended[lost] == "globex" and ended["plain1"] == ""
    assert backend.sync.exists(q.ta) == 0 and backend.sync.hget(q.tn, "a:acme") is None
    # (the entry removed by hand held one of globex's slots: its count is the repair's to mend,
    # lua/tenant_fix.lua, as before; the two read from ta were freed)
    assert backend.sync.hget(q.tn, "a:globex") == b"1"


def test_an_operators_run_now_writes_an_event(backend: Any) -> None:
    """Issue 42: running a task from the archive (or a scheduled or retry task) now wrote no event:
    the stream showed it archived, then running with nothing between. Now an ``enqueued`` event
    with ``from_state`` (and its tenant)."""
    b, x, ins = Broker(), SyncExecutor(backend.sync), Inspector(backend.sync)
    with Client(backend.sync) as c:
        c.enqueue("t", 1, queue=Q, task_id="x1", tenant="acme")
        c.enqueue("t", 2, queue=Q, task_id="s1", process_in=3600)
    taken = x.run(b.dequeue(Q, 1, 60_000, "tok00001")).tasks
    assert [id for id, _ in taken] == ["x1"]
    x.run(b.archive(Q, "x1", "tok00001", Message("t", 1, last_error="no", tenant="acme"), 10_000, 86_400_000))
    before = list(ins.events(Q))[-1].stream_id
    ins.run_task(Q, "x1")
    ins.run_task(Q, "s1")
    got = [(e.event, e.task_id, e.from_state, e.tenant, e.type) for e in ins.events(Q, since=before)]
    assert got == [("enqueued", "x1", "archived", "acme", "t"), ("enqueued", "s1", "scheduled", "", "t")]


def test_a_done_batch_mixing_plain_and_other_tasks_answers_in_order(backend: Any) -> None:
    """done sends plain successes (no lock, waiter, progress, result or key) in a short form ahead
    of the others (lua/done.lua 'plain', includes/exit exit_plain): each item's reply is still
    its own, in the items' order, and every task's 'completed' event is written once, an id with a
    space in it (it cannot go in an id list) included; an id named twice among the short items is
    ended once (its second entry: 0, no such task)."""
    b, x, ins = Broker(), SyncExecutor(backend.sync), Inspector(backend.sync)
    ids = ["p1", "full", "p 2", "p3", "lost", "d1", "d2"]
    with Client(backend.sync) as c:
        c.enqueue_many([("t", i, {"task_id": id}) for i, id in enumerate(ids)], queue=Q)
    taken = dict(x.run(b.dequeue(Q, 7, 60_000, "tok00001")).tasks)
    assert sorted(taken) == sorted(ids)
    items = [Done(id, "tok00001", decode(taken[id]), progressed=id == "full") for id in ids[:4]]
    items.append(Done("lost", "tok0000X", decode(taken["lost"]), progressed=False))  # not its lease
    got = x.run(b.done_many(Q, items))
    assert [r == 1 for r in got[:4]] == [True] * 4 and type(got[4]).__name__ == "LeaseLostError"
    done = sorted(e.task_id for e in ins.events(Q) if e.event == "completed")
    assert done == sorted(["p1", "full", "p 2", "p3"])
    assert ins.queue_info(Q).active == 3  # 'lost' is still held by its lease, d1 and d2 too
    call = b.done_many(Q, [Done(id, "tok00001", decode(taken[id]), progressed=False) for id in ("d1", "d2")])
    args = list(call.args)
    assert args[1] == 2 and args[2:] == [b"d1", "tok00001", 1, b"d2", "tok00001", 1]  # (plain = 2, short items)
    args[5] = b"d1"  # d1 named twice
    got = x.run(replace(call, args=tuple(args)))
    assert got[0] == 1 and type(got[1]).__name__ == "TaskNotFoundError"
    assert backend.sync.hexists(queue_keys(Q).tasks, "d2") and not backend.sync.hexists(queue_keys(Q).tasks, "d1")
    assert [e.task_id for e in ins.events(Q) if e.event == "completed"].count("d1") == 1
