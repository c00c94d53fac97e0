"""Inspector actions on fakeredis and the real redis-server: delete / run / archive one task and
all tasks of a state, removing a long pending list's deep task without a scan, cancel, remove_queue;
unique locks released; state chars consistent with containers. Bulk operations on 50 000 tasks."""

from __future__ import annotations

import time
from typing import Any

import pytest

from asynqpy import (
    Client,
    FakeClock,
    Inspector,
    InvalidArgumentError,
    QueueNotEmptyError,
    QueueNotFoundError,
    TaskNotFoundError,
    TaskState,
    TaskStateError,
)
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import CANCEL_CHANNEL, queue_keys
from asynqpy.redisio.executor import SyncExecutor

T0 = 1_700_000_000_000
Q = "work"
K = queue_keys(Q)
CONTAINERS = {"p": K.pending, "a": K.lease, "s": K.scheduled, "r": K.retry, "x": K.archived, "c": K.completed}


class H:
    def __init__(self, backend: Any) -> None:
        self.r = backend.sync
        self.clock = FakeClock(T0)
        self.b = Broker(self.clock)
        self.x = SyncExecutor(self.r)
        self.c = Client(self.r, clock=self.clock)
        self.insp = Inspector(self.r, clock=self.clock)

    def state(self, id: str) -> str | None:
        v = self.r.hget(K.tasks, id)
        return v[:1].decode() if v else None

    def take(self, n: int = 1) -> list[str]:
        return [id for id, _ in self.x.run(self.b.dequeue(Q, n, 30_000, "tok00000")).tasks]

    def retry(self, id: str) -> None:
        assert self.take() == [id]
        info = self.insp.task_info(Q, id)
        from asynqpy.core.model.codec import Message

        self.x.run(self.b.retry(Q, id, "tok00000", Message(info.type, info.payload, retried=1), 60_000))

    def consistent(self) -> None:
        """Every task's state char matches the one container holding it, and vice versa."""
        stored = {k.decode(): v[:1].decode() for k, v in self.r.hgetall(K.tasks).items()}
        where: dict[str, list[str]] = {}
        for code, key in CONTAINERS.items():
            members = self.r.lrange(key, 0, -1) if code == "p" else self.r.zrange(key, 0, -1)
            for m in members:
                if m:
                    where.setdefault(m.decode(), []).append(code)
        assert {id: [c] for id, c in stored.items()} == where


@pytest.fixture
def h(backend: Any) -> H:
    return H(backend)


def test_delete_task_in_each_state_and_refusals(h: H) -> None:
    h.c.enqueue("t", 1, queue=Q, task_id="active")
    h.take()
    h.c.enqueue("t", 4, queue=Q, task_id="ret")
    h.retry("ret")
    h.c.enqueue("t", 2, queue=Q, task_id="pend", unique=600)
    h.c.enqueue("t", 3, queue=Q, task_id="sched", process_in=60, unique=600)
    h.c.enqueue("t", 5, queue=Q, task_id="arch")
    h.insp.archive_task(Q, "arch")
    for id in ("pend", "sched", "ret", "arch"):
        h.insp.delete_task(Q, id)
        assert h.state(id) is None
        with pytest.raises(TaskNotFoundError):
            h.insp.task_info(Q, id)
    h.c.enqueue("t", 2, queue=Q, unique=600)  # the locks were released
    h.c.enqueue("t", 3, queue=Q, process_in=60, unique=600)
    with pytest.raises(TaskStateError, match="cannot delete task 'active': it is active .*cancel"):
        h.insp.delete_task(Q, "active")
    assert h.state("active") == "a"
    with pytest.raises(TaskNotFoundError):
        h.insp.delete_task(Q, "nope")
    with pytest.raises(QueueNotFoundError):
        h.insp.delete_task("nope", "pend")
    h.consistent()


def test_run_task(h: H) -> None:
    h.c.enqueue("t", queue=Q, task_id="sched", process_in=60)
    h.c.enqueue("t", queue=Q, task_id="ret")
    h.retry("ret")
    h.c.enqueue("t", queue=Q, task_id="arch")
    h.insp.archive_task(Q, "arch")
    h.r.delete(K.wake)
    for id in ("sched", "ret", "arch"):
        h.insp.run_task(Q, id)
        assert h.state(id) == "p"
    assert h.r.llen(K.wake) == 1  # an idle worker is woken
    assert [t.id for t in h.insp.list_tasks(Q, "pending")] == ["sched", "ret", "arch"]
    h.c.enqueue("t", queue=Q, task_id="done", retention=60)
    h.take(4)
    for id, why in (("sched", "it is active"), ("done", "it is active")):
        with pytest.raises(TaskStateError, match=why):
            h.insp.run_task(Q, id)
    h.c.enqueue("t", queue=Q, task_id="p2")
    with pytest.raises(TaskStateError, match="already pending"):
        h.insp.run_task(Q, "p2")
    h.consistent()


def test_archive_task_releases_lock(h: H) -> None:
    h.c.enqueue("t", queue=Q, task_id="ret")
    h.retry("ret")
    h.c.enqueue("t", "u", queue=Q, task_id="pend", unique=600)
    h.c.enqueue("t", queue=Q, task_id="sched", process_in=60)
    for id in ("pend", "sched", "ret"):
        h.insp.archive_task(Q, id)
        info = h.insp.task_info(Q, id)
        assert info.state is TaskState.ARCHIVED and info.archived_at is not None
    h.c.enqueue("t", "u", queue=Q, unique=600)
    with pytest.raises(TaskStateError, match="already archived"):
        h.insp.archive_task(Q, "pend")
    h.consistent()


def test_pending_removed_near_either_end_and_deep_in_the_list(h: H) -> None:
    h.insp._plans.window = 3  # search 3 ids from each end; deeper ones are located from Python
    h.c.enqueue_many([("t", i, {"task_id": f"t{i:02d}"}) for i in range(20)], queue=Q)
    h.insp.delete_task(Q, "t00")  # oldest: right end
    h.insp.archive_task(Q, "t19")  # newest: left end
    assert h.r.llen(K.pending) == 18
    h.insp.delete_task(Q, "t10")  # deep: overwritten by a placeholder, no scan
    h.insp.archive_task(Q, "t05")
    assert h.r.llen(K.pending) == 18 and h.r.lrange(K.pending, 0, -1).count(b"") == 2
    listed = [t.id for t in h.insp.list_tasks(Q, "pending", page_size=100)]
    assert listed == [f"t{i:02d}" for i in range(1, 19) if i not in (5, 10)]
    assert h.insp.queue_info(Q).latency >= 0
    assert sorted(h.take(100)) == listed  # workers skip the placeholders
    assert h.r.llen(K.pending) == 0


def test_bulk_on_every_state(h: H) -> None:
    h.c.enqueue_many([("t", i) for i in range(30)], queue=Q)
    h.c.enqueue("t", "u", queue=Q, unique=600)
    h.c.enqueue_many([("t", i, {"process_in": 60 + i}) for i in range(12)], queue=Q)
    h.insp._plans.batch = 7  # several batches
    assert h.insp.archive_all(Q, "pending") == 31
    h.c.enqueue("t", "u", queue=Q, unique=600)  # lock released
    assert h.insp.run_all(Q, TaskState.ARCHIVED) == 31
    assert h.insp.archive_all(Q, "scheduled") == 12
    assert h.insp.delete_all(Q, "archived") == 12
    assert h.insp.delete_all(Q, "pending") == 32
    info = h.insp.queue_info(Q)
    assert (info.size, info.pending) == (0, 0)
    h.c.enqueue("t", "u", queue=Q, unique=600)
    for verb, state in (("run_all", "pending"), ("archive_all", "archived"), ("delete_all", "active"),
                        ("run_all", "completed"), ("archive_all", "bogus")):
        with pytest.raises(InvalidArgumentError):
            getattr(h.insp, verb)(Q, state)
    with pytest.raises(QueueNotFoundError):
        h.insp.delete_all("nope", "pending")
    assert h.insp.delete_all(Q, "retry") == 0
    h.consistent()


def test_remove_queue(h: H) -> None:
    h.c.enqueue("t", queue=Q, task_id="busy")
    h.take()
    h.c.enqueue("t", "u", queue=Q, unique=600)
    h.c.enqueue("t", queue=Q, process_in=60)
    with pytest.raises(QueueNotEmptyError, match="holds 3 task"):
        h.insp.remove_queue(Q)
    with pytest.raises(TaskStateError, match="1 active"):
        h.insp.remove_queue(Q, force=True)
    from asynqpy.core.model.codec import Message

    h.x.run(h.b.done(Q, "busy", "tok00000", Message("t")))
    h.insp.pause(Q)
    q = queue_keys(Q)
    h.r.zadd(q.tw, {"acme": 1})  # a tenant held by its rate, a stale tenant slot: they go with the queue
    h.r.hset(q.ta, "gone", "acme")
    h.insp.remove_queue(Q, force=True)
    assert Q not in h.insp.queues()
    assert [k for k in h.r.keys(f"asynqpy:{{{Q}}}:*") if b":processed:" not in k and b":failed:" not in k] == []
    with pytest.raises(QueueNotFoundError):
        h.insp.remove_queue(Q)
    h.c.enqueue("t", "u", queue="other", unique=600)
    h.insp.delete_all("other", "pending")
    h.insp.remove_queue("other")  # empty: no force needed
    assert h.insp.queues() == []


def test_cancel_archives_with_reason_and_publishes(h: H, backend: Any) -> None:
    pubsub = h.r.pubsub()
    pubsub.subscribe(CANCEL_CHANNEL)
    h.c.enqueue("t", "u", queue=Q, task_id="run", unique=600)
    h.c.enqueue("t", queue="other", task_id="run")  # the same id pending in another queue
    h.take()
    info = h.insp.cancel("run")  # found in whichever queue has it active
    assert info.state is TaskState.ARCHIVED and info.queue == Q and info.last_error == "cancelled by an operator"
    assert h.r.zscore(K.lease, "run") is None and h.state("run") == "x"
    h.c.enqueue("t", "u", queue=Q, unique=600)  # lock released
    deadline = time.monotonic() + 5
    got = None
    while got is None and time.monotonic() < deadline:
        m = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        got = m["data"] if m else None
    import msgpack

    assert msgpack.unpackb(got) == [Q, "run", "tok00000"]  # the token names the run cancelled
    with pytest.raises(TaskStateError, match="it is archived; only an active"):
        h.insp.cancel("run", queue=Q)
    with pytest.raises(TaskStateError, match="it is pending"):
        h.insp.cancel("run", queue="other")
    with pytest.raises(TaskNotFoundError):
        h.insp.cancel("nope")
    with pytest.raises(QueueNotFoundError):
        h.insp.cancel("run", queue="nope")
    h.insp.run_task(Q, "run")  # the operator can run it again
    assert h.state("run") == "p"
    pubsub.close()
    h.consistent()


@pytest.mark.parametrize("verb", ["delete", "archive"])
@pytest.mark.parametrize("state", ["pending", "scheduled"])
def test_operator_action_on_an_id_reused_since_read_releases_the_right_lock(h: H, verb: str, state: str) -> None:
    """Issue 9, item 4: between the Inspector's read of a task and its script, the id is reused
    for a unique task with another payload. The script must refuse (the stored value changed) and
    the Inspector read again, so the new task goes with its own lock; it used to be deleted (or
    archived) while its lock stayed, and the next enqueue of its payload was a DuplicateTaskError
    with no task behind it."""
    from asynqpy import DuplicateTaskError
    from asynqpy.core.inspector.inspection import Plans
    from asynqpy.core.model.codec import unique_digest

    delay = {"process_in": 600} if state == "scheduled" else {}
    h.c.enqueue("t", "first", queue=Q, task_id="u", unique=600, **delay)
    plans = Plans(h.b)
    plan = plans.act(verb, Q, "u")
    calls = next(plan)  # the read of the task
    results = h.x.run_many(calls)
    # meanwhile, another operator deletes it and a producer reuses the id for another payload
    h.insp.delete_task(Q, "u")
    h.c.enqueue("t", "second", queue=Q, task_id="u", unique=600, **delay)
    try:
        while True:
            calls = plan.send(results)
            results = h.x.run_many(calls)
    except StopIteration:
        pass
    assert h.r.get(K.lock(unique_digest("t", "second"))) is None  # the removed task's lock is released
    assert h.r.keys(K.lock("") + "*") == []  # and no other lock is left
    if verb == "archive":
        info = h.insp.task_info(Q, "u")
        assert info.state is TaskState.ARCHIVED and info.payload == "second"
    else:
        assert h.state("u") is None
    h.c.enqueue("t", "second", queue=Q, unique=600)  # no DuplicateTaskError with nothing behind it
    with pytest.raises(DuplicateTaskError):
        h.c.enqueue("t", "second", queue=Q, unique=600)
    h.consistent()


def test_cancel_notice_of_an_earlier_run_does_not_cancel_a_later_run(h: H) -> None:
    """Issue 9 (likely item, confirmed): the cancel notice carries the lease token of the run
    cancelled; a later run of the same id on the same server (run again from the archive before
    the notice arrived) holds another token and is not cancelled by it."""
    import msgpack

    from asynqpy.worker.canceller import Canceller

    pubsub = h.r.pubsub()
    pubsub.subscribe(CANCEL_CHANNEL)
    h.c.enqueue("t", queue=Q, task_id="run")
    h.take()  # run 1, token tok00000
    h.insp.cancel("run")
    notice = None
    deadline = time.monotonic() + 5
    while notice is None and time.monotonic() < deadline:
        m = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        notice = m["data"] if m else None
    pubsub.close()
    assert notice is not None
    h.insp.run_task(Q, "run")
    assert h.x.run(h.b.dequeue(Q, 1, 30_000, "tok11111")).tasks  # run 2, token tok11111

    class Run:
        def __init__(self, token: str) -> None:
            self.queue, self.id, self.token = Q, "run", token

    class Processor:  # what the canceller uses of the server's processor
        def __init__(self) -> None:
            self.held = {(Q, "run"): Run("tok11111")}
            self.lost: list[str] = []

        def lose(self, r: Run, why: str) -> None:
            self.lost.append(r.token)

    p = Processor()
    canceller = Canceller(None, p)  # type: ignore[arg-type]
    canceller.handle(notice)  # the notice of run 1 arrives late
    assert p.lost == []  # run 2 keeps running
    canceller.handle(msgpack.packb([Q, "run", "tok11111"]))  # a cancel of run 2 itself
    assert p.lost == ["tok11111"]


@pytest.mark.real
def test_bulk_20k_tasks(redis_url: str) -> None:
    n = 20_000  # twenty of the bulk actions' 1 000-task batches each (50 000 took 18 s in the suite)
    with Client(redis_url) as c, Inspector(redis_url) as insp:
        c.enqueue_many([("t", i) for i in range(n)], queue=Q)
        c.enqueue_many([("t", i, {"process_in": 600}) for i in range(n)], queue=Q)
        assert insp.archive_all(Q, "pending") == n
        assert insp.run_all(Q, "archived") == n
        assert insp.delete_all(Q, "scheduled") == n
        assert insp.delete_all(Q, "pending") == n
        info = insp.queue_info(Q)
        assert info.size == 0 and insp.redis.hlen(K.tasks) == 0


def test_async_inspector_runs_the_same_plans(h: H, backend: Any) -> None:
    import asyncio

    from asynqpy import AsyncInspector

    h.c.enqueue_many([("t", i, {"task_id": f"t{i}"}) for i in range(5)], queue=Q)
    h.c.enqueue("t", queue=Q, task_id="run")
    h.take()  # t0 is active now

    async def main() -> None:
        async with AsyncInspector(backend.new_async(), clock=h.clock) as ai:
            assert await ai.queues() == [Q]
            assert [t.id for t in await ai.list_tasks(Q, "pending", page_size=2)] == ["t1", "t2"]
            await ai.archive_task(Q, "t1")
            await ai.run_task(Q, "t1")
            await ai.delete_task(Q, "t2")
            assert await ai.archive_all(Q, "pending") == 4
            assert await ai.run_all(Q, "archived") == 4
            assert await ai.delete_all(Q, "pending") == 4
            assert (await ai.cancel("t0")).state is TaskState.ARCHIVED
            assert [d.processed for d in await ai.history(Q, 1)] == [0]
            assert await ai.pause(Q) and await ai.unpause(Q)
            await ai.remove_queue(Q, force=True)
            with pytest.raises(QueueNotFoundError):
                await ai.queue_info(Q)

    asyncio.run(main())


@pytest.mark.real
def test_memory_refused_is_none_not_an_error(redis_url: str) -> None:
    import redis

    admin = redis.Redis.from_url(redis_url)
    admin.acl_setuser("nomem", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                      commands=["+@all", "-memory"])
    try:
        Client(redis_url).enqueue("t", queue=Q)
        port = redis_url.rsplit(":", 1)[1].split("/")[0]
        with Inspector(f"redis://nomem:pw@127.0.0.1:{port}/0") as insp:
            info = insp.queue_info(Q)
            assert info.pending == 1 and info.memory_bytes is None
            assert insp.all_queue_info()[0].memory_bytes is None
    finally:
        admin.acl_deluser("nomem")
