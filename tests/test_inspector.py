"""The Inspector on seeded queues, on fakeredis and on the real redis-server: queue info, listing
every state with paging boundaries, task info, servers. Time is simulated with FakeClock."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import (
    AsyncInspector,
    Client,
    FakeClock,
    Inspector,
    InvalidArgumentError,
    QueueNotFoundError,
    ServeMux,
    Task,
    TaskNotFoundError,
    TaskState,
)
from asynqpy.core.model.codec import Message
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import ALL_QUEUES, queue_keys
from asynqpy.redisio.executor import SyncExecutor

T0 = 1_700_000_000_000
Q = "work"
MAX_AGE = 90 * 24 * 3600 * 1000


class Seeded:
    """A queue holding tasks in every state, made through the real scripts on a fake clock:
    5 pending (p0..p4, p0 oldest), 2 active (a0 leased 30 s, a1 leased 1 s), 3 scheduled
    (s0 due in 10 s, s1 in 20 s, s2 in 30 s), 2 retry, 2 archived, 1 completed."""

    def __init__(self, backend: Any) -> None:
        self.r = backend.sync
        self.clock = FakeClock(T0)
        self.b = Broker(self.clock)
        self.x = SyncExecutor(self.r)
        self.client = Client(self.r, clock=self.clock)
        self.insp = Inspector(self.r, clock=self.clock)
        c = self.client
        for i in range(2):
            c.enqueue("act", {"i": i}, queue=Q, task_id=f"a{i}")
        self.take(1, "tokA0000", 30_000)
        self.take(1, "tokA1111", 1_000)
        for i in range(4):
            c.enqueue("fail", i, queue=Q, task_id=f"f{i}", max_retry=1 if i >= 2 else 5, retention=0)
        self.fail_all()
        c.enqueue("ok", "done", queue=Q, task_id="c0", retention=3600)
        res = self.x.run(self.b.dequeue(Q, 1, 30_000, "tokC0000"))
        msg = Message("ok", "done", retention_ms=3_600_000, completed_at_ms=T0, result=b"R")
        self.x.run(self.b.complete(Q, "c0", "tokC0000", msg))
        assert res.tasks
        for i in range(3):
            c.enqueue("later", i, queue=Q, task_id=f"s{i}", process_in=10 * (i + 1))
        for i in range(5):
            self.clock.advance(1)
            c.enqueue("email", {"to": i}, queue=Q, task_id=f"p{i}")

    def take(self, n: int, token: str, lease_ms: int) -> None:
        assert self.x.run(self.b.dequeue(Q, n, lease_ms, token)).tasks

    def fail_all(self) -> None:
        for i in range(4):
            self.x.run(self.b.dequeue(Q, 1, 30_000, f"tokF000{i}"))
            m = Message("fail", i, max_retry=5, last_error=f"boom {i}", last_failed_at_ms=T0)
            if i < 2:
                self.x.run(self.b.retry(Q, f"f{i}", f"tokF000{i}", m.with_(retried=1), 60_000 * (i + 1)))
            else:
                self.clock.advance(1)
                self.x.run(self.b.archive(Q, f"f{i}", f"tokF000{i}", m, 10_000, MAX_AGE))


@pytest.fixture
def s(backend: Any) -> Seeded:
    return Seeded(backend)


def test_queue_info_counts_latency_counters(s: Seeded, backend: Any) -> None:
    s.clock.advance(2)
    info = s.insp.queue_info(Q)
    assert (info.pending, info.active, info.scheduled, info.retry, info.archived, info.completed) == (5, 2, 3, 2, 2, 1)
    assert info.size == 15 and info.queue == Q and not info.paused
    assert info.latency == pytest.approx(6.0)  # p0 enqueued at T0 + 3 s, now is T0 + 9 s
    assert (info.processed_today, info.failed_today, info.processed_total, info.failed_total) == (5, 4, 5, 4)
    assert info.timestamp.timestamp() * 1000 == T0 + 9000
    assert info.trimmed == 0
    if backend.kind == "fake":
        assert info.memory_bytes is None  # fakeredis has no MEMORY: reported as None, not an error
    else:
        assert info.memory_bytes is not None and info.memory_bytes > 1000
    s.insp.pause(Q)
    assert s.insp.queue_info(Q).paused
    with pytest.raises(QueueNotFoundError):
        s.insp.queue_info("nope")
    with pytest.raises(InvalidArgumentError):
        s.insp.queue_info("bad queue")


def test_queue_info_empty_queue_and_all_queue_info(s: Seeded) -> None:
    s.client.enqueue("x", queue="other")
    s.x.run(s.b.dequeue("other", 1, 1000, "tok00000"))
    infos = s.insp.all_queue_info()
    assert [i.queue for i in infos] == ["other", Q]
    other = infos[0]
    assert (other.size, other.pending, other.active, other.latency) == (1, 0, 1, 0.0)
    assert infos[1] == s.insp.queue_info(Q)


def test_all_queue_info_is_two_round_trips_and_a_few_commands_a_queue(backend: Any) -> None:
    """Every queue's info (``asynqpy stats``, the dashboard, the console): the queue list, then one
    pipelined round trip of stats script calls, up to STATS_BATCH queues a call (on a Cluster,
    one slot's queues a call), whatever the number of queues. On a real Redis each queue costs a
    dozen commands, script-internal ones included (29 when every queue was its own script call
    and seven MEMORY USAGE round-trip commands); with the memory reading, seven more inside the
    script. The same counts and counters as queue_info, queue by queue."""
    from asynqpy.core.inspector.inspection import STATS_BATCH

    r, client, insp = backend.sync, Client(backend.sync), Inspector(backend.sync)
    steps: list[int] = []
    run_many = insp._exec.run_many
    insp._exec.run_many = lambda calls: steps.append(len(calls)) or run_many(calls)  # type: ignore[method-assign]
    made = 0
    for n in (5, 50):
        for i in range(made, n):  # every fifth queue with a task (pending or scheduled), the others empty
            if i % 5 == 0:
                client.enqueue("t", i, queue=f"many-{i}", process_in=60 if i % 10 else 0)
            else:
                r.sadd(ALL_QUEUES, f"many-{i}")
        made = n
        names = insp.queues()
        assert {f"many-{i}" for i in range(n)} <= set(names)
        for memory in (False, True):
            steps.clear()
            if backend.kind == "real":
                r.config_resetstat()
            infos = insp.all_queue_info(memory=memory)
            assert [i.queue for i in infos] == names
            calls = -(-len(names) // STATS_BATCH)
            assert steps[0] == 1 and len(steps) == 2 and (steps[1] == calls or backend.kind == "cluster")
            assert steps[1] <= len(names)
            mine = {i.queue: i for i in infos if i.queue.startswith("many-")}
            assert all((q.pending, q.scheduled) == ((0, 0) if i % 5 else (0, 1) if i % 10 else (1, 0))
                       for i, q in ((int(name[5:]), q) for name, q in mine.items()))
            assert all((q.memory_bytes is not None) == (memory and backend.kind != "fake") for q in infos)
            if backend.kind == "real":
                cmds = sum(int(v["calls"]) for k, v in r.info("commandstats").items()
                           if k not in ("cmdstat_config|resetstat", "cmdstat_info"))
                # LLEN, MGET, 12 ZCARD (the tenant zset and ring too), HMGET of conf (the cap and its
                # counters: bounded queues), LRANGE + HGET if pending
                per_queue = 17 + (8 if memory else 0)
                assert cmds <= 1 + 2 * calls + per_queue * len(names), (n, memory, cmds)
    steps.clear()
    assert insp.queue_info("many-0").pending == 1
    assert steps == [2]  # SISMEMBER and the stats script (the memory reading inside it)


def test_queues_read_together_share_a_slot_on_a_cluster() -> None:
    """On a Cluster, all_queue_info groups queues by slot (a script's keys must share one); the
    slot is Redis's (CRC16 of the hash tag); on one server, STATS_BATCH queues a call."""
    from redis.crc import key_slot as redis_slot

    from asynqpy.core.inspector.inspection import STATS_BATCH, Plans, key_slot

    names = [f"q{i}" for i in range(250)] + ["a.b:c-d_E"]
    tags = ["a{b}c", "{x}", "x}{y", "{}a", "a{}{b}", "é{ü}"]
    assert all(key_slot(k) == redis_slot(k.encode()) for k in [queue_keys(n).pending for n in names] + tags)
    one = Plans(Broker())._batches(names)
    assert len(names) % STATS_BATCH and \
        [len(b) for b in one] == [STATS_BATCH] * (len(names) // STATS_BATCH) + [len(names) % STATS_BATCH]
    grouped = Plans(Broker(), cluster=True)._batches(names)
    assert sorted(n for b in grouped for n in b) == sorted(names)
    assert all(len({key_slot(queue_keys(n).pending) for n in b}) == 1 for b in grouped)
    target = key_slot("s0")
    same = list(itertools.islice((n for n in (f"s{i}" for i in range(100_000)) if key_slot(n) == target), 3))  # n: the tag
    assert len(same) == 3
    assert [same] == Plans(Broker(), cluster=True)._batches(same)


def test_an_invalid_member_of_the_queues_set_is_skipped_and_logged_once(
        backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    """One bad member of asynqpy:queues (written by hand, or by a role that may SADD) used to make
    every all-queues view raise: it is skipped, with one WARNING per name."""
    Client(backend.sync).enqueue("t", queue="healthy")
    k = backend.kind  # (each name is logged once per process: one set of names per backend)
    backend.sync.sadd("asynqpy:queues", f"bad queue {k}", b"\xff\xfe" + k.encode(), f"{{tagged}}{k}")
    insp = Inspector(backend.sync)
    with caplog.at_level("WARNING", logger="asynqpy.inspector"):
        assert insp.queues() == ["healthy"]
        assert [i.queue for i in insp.all_queue_info()] == ["healthy"]
        assert [s.queue for s in insp.all_stats()] == ["healthy"]

        async def both() -> tuple[list[str], list[str]]:
            async with AsyncInspector(backend.new_async()) as ai:
                return await ai.queues(), [i.queue for i in await ai.all_queue_info(memory=False)]

        assert asyncio.run(both()) == (["healthy"], ["healthy"])
    warned = [r.getMessage() for r in caplog.records if "asynqpy:queues" in r.getMessage()]
    assert len(warned) == 3 and all(r.levelname == "WARNING" for r in caplog.records)
    assert any(f"'bad queue {k}'" in w for w in warned) and any(f"{{tagged}}{k}" in w for w in warned)


def test_trimmed_counter(s: Seeded) -> None:
    assert s.x.run(s.b.trim(Q, 1, MAX_AGE)) == 1
    info = s.insp.queue_info(Q)
    assert (info.archived, info.trimmed) == (1, 1)


def test_list_every_state_in_order_with_fields(s: Seeded) -> None:
    ids = lambda st, **kw: [t.id for t in s.insp.list_tasks(Q, st, **kw)]  # noqa: E731
    assert ids("pending") == ["p0", "p1", "p2", "p3", "p4"]  # the order they run in
    assert ids(TaskState.SCHEDULED) == ["s0", "s1", "s2"]  # soonest first
    assert ids("retry") == ["f0", "f1"]
    assert ids("archived") == ["f3", "f2"]  # newest first
    assert ids("completed") == ["c0"]
    s.clock.advance(2)  # a1's 1 s lease has expired: orphaned
    active = {t.id: t for t in s.insp.list_tasks(Q, "active")}
    assert list(active) == ["a1", "a0"] and active["a1"].orphaned and not active["a0"].orphaned
    assert active["a0"].lease_until is not None and active["a0"].lease_until.timestamp() * 1000 == T0 + 30_000
    assert active["a0"].payload == {"i": 0} and active["a0"].state is TaskState.ACTIVE
    p0 = s.insp.list_tasks(Q, "pending", page_size=1)[0]
    assert p0.type == "email" and p0.payload == {"to": 0} and p0.enqueued_at is not None
    s0 = s.insp.list_tasks(Q, "scheduled")[0]
    assert s0.next_process_at is not None and s0.next_process_at.timestamp() * 1000 == T0 + 12_000  # scheduled at T0 + 2 s
    f3 = s.insp.list_tasks(Q, "archived")[0]
    assert f3.last_error == "boom 3" and f3.archived_at is not None
    c0 = s.insp.list_tasks(Q, "completed")[0]
    assert c0.result == b"R" and c0.state is TaskState.COMPLETED


def test_paging_boundaries(backend: Any) -> None:
    insp = Inspector(backend.sync)
    c = Client(backend.sync)
    c.enqueue_many([("t", i, {"task_id": f"t{i:02d}"}) for i in range(25)], queue=Q)
    c.enqueue_many([("t", i, {"task_id": f"z{i:02d}", "process_in": 100 + i}) for i in range(25)], queue=Q)
    for state, prefix in (("pending", "t"), ("scheduled", "z")):
        pages = [[t.id for t in insp.list_tasks(Q, state, page=p, page_size=10)] for p in (1, 2, 3, 4)]
        assert [len(p) for p in pages] == [10, 10, 5, 0]
        assert sum(pages, []) == [f"{prefix}{i:02d}" for i in range(25)]
        assert len(insp.list_tasks(Q, state, page=1, page_size=25)) == 25
        assert len(insp.list_tasks(Q, state, page=2, page_size=25)) == 0
        assert len(insp.list_tasks(Q, state, page=1, page_size=1000)) == 25
    assert insp.list_tasks(Q, "retry") == [] and insp.list_tasks(Q, "active", page=7) == []
    for bad in ({"page": 0}, {"page_size": 0}, {"page_size": 1001}, {"page": True}, {"page": "1"}):
        with pytest.raises(InvalidArgumentError):
            insp.list_tasks(Q, "pending", **bad)
    for page in (10**20, 10**15 // 10 + 2):  # a page past what Redis takes used to be an untyped ResponseError
        with pytest.raises(InvalidArgumentError, match=r"page must be an int from 1 to 100000000000001 \(pages of 10\)"):
            insp.list_tasks(Q, "pending", page=page, page_size=10)
    for state in ("pending", "scheduled", "archived"):  # the last page allowed is read, empty
        assert insp.list_tasks(Q, state, page=10**15 // 1000 + 1, page_size=1000) == []
    with pytest.raises(InvalidArgumentError, match="unknown task state 'done'"):
        insp.list_tasks(Q, "done")
    with pytest.raises(QueueNotFoundError):
        insp.list_tasks("nope", "pending")


def test_task_info_every_state_and_not_found(s: Seeded) -> None:
    for id, state in (("p0", "pending"), ("a0", "active"), ("s1", "scheduled"), ("f0", "retry"),
                      ("f2", "archived"), ("c0", "completed")):
        info = s.insp.task_info(Q, id)
        assert info.state.value == state and info.id == id and info.queue == Q
    assert s.insp.task_info(Q, "f1").next_process_at.timestamp() * 1000 == T0 + 120_000  # type: ignore[union-attr]
    assert s.insp.task_info(Q, "a1").lease_until is not None
    with pytest.raises(TaskNotFoundError):
        s.insp.task_info(Q, "nope")
    with pytest.raises(QueueNotFoundError):
        s.insp.task_info("nope", "p0")


def test_history_newest_first(s: Seeded) -> None:
    h = s.insp.history(Q, days=3)
    assert [d.date for d in h] == [s.clock.today() - timedelta(days=i) for i in range(3)]
    assert (h[0].processed, h[0].failed) == (5, 4) and (h[1].processed, h[1].failed) == (0, 0)
    s.clock.advance(86_400)
    assert [(d.processed, d.failed) for d in s.insp.history(Q, 2)] == [(0, 0), (5, 4)]
    for bad in (0, 91, True):
        with pytest.raises(InvalidArgumentError):
            s.insp.history(Q, bad)
    with pytest.raises(QueueNotFoundError):
        s.insp.history("nope")


def test_malformed_task_is_listed_not_fatal(backend: Any) -> None:
    Client(backend.sync).enqueue("t", queue=Q, task_id="good")
    k = queue_keys(Q)
    backend.sync.hset(k.tasks, "bad", b"p\xc1garbage")
    backend.sync.lpush(k.pending, "bad")
    infos = Inspector(backend.sync).list_tasks(Q, "pending")
    assert [(t.id, t.type) for t in infos] == [("good", "t"), ("bad", "(malformed)")]
    assert "undecodable" in infos[1].last_error


def test_servers_show_running_tasks(backend: Any) -> None:
    client = Client(backend.sync)
    mux = ServeMux()
    started = asyncio.Event()

    @mux.handle("slow")
    async def slow(task: Task) -> None:
        started.set()
        await asyncio.sleep(30)

    insp = Inspector(backend.sync)
    assert insp.servers() == []
    id = client.enqueue("slow", queue=Q, timeout=60).id

    async def main() -> None:
        async with serving(backend.new_async(), mux, queues={Q: 3, "b": 1}, concurrency=4, heartbeat_interval=0.1,
                           shutdown_timeout=0):
            await until(lambda: started.is_set())
            await until(lambda: any(s.active for s in insp.servers()))
            [srv] = insp.servers()
            assert srv.queues == {Q: 3, "b": 1} and srv.concurrency == 4 and not srv.strict and srv.pid > 0
            [w] = srv.active
            assert (w.task_id, w.queue, w.type) == (id, Q, "slow")
            assert w.deadline is not None and 59 <= (w.deadline - w.started).total_seconds() <= 60
            async with AsyncInspector(backend.new_async()) as ai:
                assert [x.id for x in await ai.servers()] == [srv.id]
                assert (await ai.queue_info(Q)).active == 1

    asyncio.run(main())
    assert insp.servers() == []  # unregistered at shutdown
