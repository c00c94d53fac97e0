"""Every Lua transition, each success path and every error return, on fakeredis and real Redis.
Time is simulated with FakeClock (scripts are told "now")."""

from __future__ import annotations

from typing import Any

import pytest

from asynqpy import DuplicateTaskError, FakeClock, LeaseLostError, TaskIdConflictError, TaskNotFoundError
from asynqpy.core.model.codec import Message, decode
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

Q = "q1"
K = queue_keys(Q)
MAX_AGE = 90 * 24 * 3600 * 1000


class H:
    """Harness: a broker on a fake clock, run synchronously."""

    def __init__(self, backend: Any) -> None:
        self.r = backend.sync
        self.clock = FakeClock(1_700_000_000_000)
        self.b = Broker(self.clock)
        self.x = SyncExecutor(self.r)

    def run(self, call: Any) -> Any:
        return self.x.run(call)

    def enqueue(self, id: str, msg: Message | None = None, unique: int = 0) -> int:
        return self.run(self.b.enqueue(Q, id, msg or Message("t", {"id": id}), unique))

    def take(self, n: int = 1, token: str = "tok00001", lease_ms: int = 30_000) -> list[str]:
        res = self.run(self.b.dequeue(Q, n, lease_ms, token))
        return [id for id, _ in res.tasks]

    def state(self, id: str) -> str | None:
        v = self.r.hget(K.tasks, id)
        return v[:1].decode() if v else None

    def msg(self, id: str) -> Message:
        v = self.r.hget(K.tasks, id)
        return decode(v[9:] if v[:1] == b"a" else v[1:])


@pytest.fixture
def h(backend: Any) -> H:
    return H(backend)


def test_enqueue_and_id_conflict(h: H) -> None:
    assert h.enqueue("a") == 1
    assert h.state("a") == "p"
    assert h.r.lrange(K.pending, 0, -1) == [b"a"]
    assert h.r.llen(K.wake) == 1
    with pytest.raises(TaskIdConflictError):
        h.enqueue("a", Message("t", {"id": "another task"}))
    assert h.r.llen(K.pending) == 1  # nothing changed
    assert h.enqueue("a") == 1  # the very same message: this call sent again after a lost reply
    assert h.r.llen(K.pending) == 1 and h.state("a") == "p"  # recognised, nothing written twice


def test_enqueue_unique_duplicate_and_release_on_done(h: H) -> None:
    m = Message("t", {"x": 1}, unique=True)
    lock = K.lock(m.lock_digest())
    assert h.enqueue("a", m, unique=60) == 1
    assert h.r.get(lock) == b"a" and 0 < h.r.ttl(lock) <= 60
    with pytest.raises(DuplicateTaskError):
        h.enqueue("b", Message("t", {"x": 1}, unique=True), unique=60)
    assert h.state("b") is None
    h.take()
    assert h.run(h.b.done(Q, "a", "tok00001", m)) == 1
    assert h.r.get(lock) is None
    assert h.enqueue("c", Message("t", {"x": 1}, unique=True), unique=60) == 1


def test_id_conflict_does_not_take_the_lock(h: H) -> None:
    h.enqueue("a")
    m = Message("t", 7, unique=True)
    with pytest.raises(TaskIdConflictError):
        h.enqueue("a", m, unique=60)
    assert h.r.get(K.lock(m.lock_digest())) is None


def test_finished_task_id_can_be_reused(h: H) -> None:
    h.enqueue("a")
    h.take()
    h.run(h.b.archive(Q, "a", "tok00001", h.msg("a"), 100, MAX_AGE))
    assert h.state("a") == "x"
    assert h.enqueue("a") == 1
    assert h.state("a") == "p" and h.r.zcard(K.archived) == 0


def test_schedule_signals_only_an_earlier_due_time(h: H) -> None:
    due = h.run(h.b.schedule(Q, "s1", Message("t"), 5000))
    assert due == h.clock.t + 5000
    assert h.r.zscore(K.scheduled, "s1") == due
    assert h.r.lpop(K.tick) == b"1"
    h.run(h.b.schedule(Q, "s2", Message("t"), 9000))
    assert h.r.llen(K.tick) == 0  # later than the head: forwarders need not wake
    h.run(h.b.schedule(Q, "s3", Message("t"), 1000))
    assert h.r.llen(K.tick) == 1
    with pytest.raises(TaskIdConflictError):
        h.run(h.b.schedule(Q, "s1", Message("t", "another task"), 1000))
    assert h.run(h.b.schedule(Q, "s1", Message("t"), 5000)) == due  # sent again: its own task
    m = Message("t", 1, unique=True)
    h.run(h.b.schedule(Q, "u1", m, 10_000, 60))
    assert h.r.ttl(K.lock(m.lock_digest())) == 70  # lock counts from the due time
    with pytest.raises(DuplicateTaskError):
        h.run(h.b.schedule(Q, "u2", Message("t", 1, unique=True), 10_000, 60))


def test_dequeue_fifo_lease_and_wake_chain(h: H) -> None:
    for i in range(5):
        h.enqueue(f"t{i}")
    h.r.delete(K.wake)
    res = h.run(h.b.dequeue(Q, 2, 30_000, "abcd1234"))
    assert [i for i, _ in res.tasks] == ["t0", "t1"]
    assert res.remaining == 3 and res.now_ms == h.clock.t
    assert decode(res.tasks[0][1]).payload == {"id": "t0"}
    assert h.r.hget(K.tasks, "t0")[:9] == b"aabcd1234"
    assert h.r.zscore(K.lease, "t0") == h.clock.t + 30_000
    assert h.r.llen(K.wake) == 1  # tasks remain: another idle worker is woken
    res = h.run(h.b.dequeue(Q, 10, 30_000, "abcd1235"))
    assert len(res.tasks) == 3 and res.remaining == 0
    assert h.run(h.b.dequeue(Q, 10, 30_000, "x")).tasks == []


def test_dequeue_skips_paused_queue_and_missing_data(h: H) -> None:
    h.enqueue("a")
    assert h.run(h.b.pause(Q)) is True
    assert h.run(h.b.pause(Q)) is False
    res = h.run(h.b.dequeue(Q, 1, 1000, "tok00001"))
    assert res.remaining == -1 and res.tasks == []
    assert h.r.llen(K.pending) == 1  # kept
    h.r.delete(K.wake)
    assert h.run(h.b.unpause(Q)) is True
    assert h.r.llen(K.wake) == 1
    assert h.run(h.b.unpause(Q)) is False
    h.r.lpush(K.pending, "ghost")  # an id whose data is gone
    res = h.run(h.b.dequeue(Q, 5, 1000, "tok00001"))
    assert [i for i, _ in res.tasks] == ["a"]
    assert h.r.zscore(K.lease, "ghost") is None


def test_done_and_its_refusals(h: H) -> None:
    h.enqueue("a")
    h.take(token="tok00001")
    with pytest.raises(LeaseLostError):
        h.run(h.b.done(Q, "a", "tok99999", h.msg("a")))
    with pytest.raises(TaskNotFoundError):
        h.run(h.b.done(Q, "nope", "tok00001", Message("t")))
    assert h.run(h.b.done(Q, "a", "tok00001", h.msg("a"))) == 1
    assert h.state("a") is None and h.r.zcard(K.lease) == 0
    assert h.r.get(K.processed) == b"1"
    day = K.processed_on(h.clock.today())
    assert h.r.get(day) == b"1" and h.r.ttl(day) > 80 * 24 * 3600
    h.enqueue("p")
    with pytest.raises(LeaseLostError):  # pending, not active
        h.run(h.b.done(Q, "p", "tok00001", h.msg("p")))


def test_complete_keeps_result_for_retention(h: H) -> None:
    h.enqueue("a", Message("t", retention_ms=60_000))
    h.take()
    m = h.msg("a").with_(completed_at_ms=h.clock.t, result=b"ok")
    with pytest.raises(LeaseLostError):
        h.run(h.b.complete(Q, "a", "zzzzzzzz", m))
    assert h.run(h.b.complete(Q, "a", "tok00001", m)) == 1
    assert h.state("a") == "c" and h.msg("a").result == b"ok"
    assert h.r.zscore(K.completed, "a") == h.clock.t + 60_000
    with pytest.raises(TaskNotFoundError):
        h.run(h.b.complete(Q, "b", "tok00001", m))
    assert h.run(h.b.expire(Q, 100)) == (0, 60_000)
    h.clock.advance(60)
    assert h.run(h.b.expire(Q, 100)) == (1, -1)
    assert h.state("a") is None


def test_retry_worker_and_recoverer_modes(h: H) -> None:
    h.enqueue("a")
    h.take(lease_ms=10_000)
    m = h.msg("a").with_(retried=1, last_error="boom")
    with pytest.raises(LeaseLostError):
        h.run(h.b.retry(Q, "a", "tok00001", m, 0, recover=True))  # recoverer: lease still alive (-4)
    with pytest.raises(LeaseLostError):
        h.run(h.b.retry(Q, "a", "badtoken", m, 0))
    h.r.delete(K.tick)
    due = h.run(h.b.retry(Q, "a", "tok00001", m, 2000))
    assert due == h.clock.t + 2000 and h.state("a") == "r"
    assert h.r.llen(K.tick) == 1
    assert h.r.get(K.failed) == b"1" and h.r.get(K.processed) == b"1"
    with pytest.raises(TaskNotFoundError):
        h.run(h.b.retry(Q, "zz", "tok00001", m, 0, recover=True))
    # the recoverer may retry once the lease has expired
    h.enqueue("b")
    h.take(lease_ms=1000)
    h.clock.advance(1.001)
    assert h.run(h.b.retry(Q, "b", "tok00001", h.msg("b").with_(retried=1), 0, recover=True)) == h.clock.t


def test_recoverer_cannot_overwrite_a_later_run_of_the_same_id(h: H) -> None:
    """Issue 9, item 3: a recoverer that read an expired lease, then stalled while the id was
    reused for a new task (new payload, new run), must not turn that run into the old message."""
    h.enqueue("a", Message("t", {"run": 1}))
    h.take(token="old00001", lease_ms=1000)
    h.clock.advance(1.001)
    expired = h.run(h.b.expired(Q))
    [(id, value)] = expired.tasks
    old_token, old_msg = value[1:9], decode(value[9:])
    # meanwhile: another recoverer retried it, it ran and was archived, the id was reused
    assert h.run(h.b.retry(Q, "a", old_token, old_msg.with_(retried=1), 0, recover=True)) > 0
    h.run(h.b.forward(Q))
    h.take(token="mid00001")
    h.run(h.b.archive(Q, "a", "mid00001", h.msg("a"), 100, MAX_AGE))
    h.enqueue("a", Message("t", {"run": 2}))
    h.take(token="new00001", lease_ms=1000)
    h.clock.advance(1.001)  # the new run's lease has expired too: only the token tells them apart
    with pytest.raises(LeaseLostError):
        h.run(h.b.retry(Q, "a", old_token, old_msg.with_(retried=1, last_error="stale"), 0, recover=True))
    with pytest.raises(LeaseLostError):
        h.run(h.b.archive(Q, "a", old_token, old_msg, 100, MAX_AGE, recover=True))
    assert h.state("a") == "a" and h.msg("a").payload == {"run": 2}  # the later run is untouched
    assert h.run(h.b.retry(Q, "a", b"new00001", h.msg("a").with_(retried=1), 0, recover=True)) > 0


def test_archive_trims_by_size_and_age_deleting_data(h: H) -> None:
    m = Message("t", 5, unique=True)
    for i in range(4):
        h.enqueue(f"a{i}", m if i == 3 else None, unique=60 if i == 3 else 0)
    h.take(4)
    for i in range(3):
        assert h.run(h.b.archive(Q, f"a{i}", "tok00001", h.msg(f"a{i}"), 2, MAX_AGE)) == 1
        h.clock.advance(1)
    assert h.r.zrange(K.archived, 0, -1) == [b"a1", b"a2"]
    assert h.state("a0") is None  # trimmed task's data is gone too
    h.clock.advance(3600)
    assert h.run(h.b.archive(Q, "a3", "tok00001", m, 10, 3600 * 1000)) == 1
    assert h.r.zrange(K.archived, 0, -1) == [b"a3"]  # a1, a2 aged out
    assert h.state("a1") is None and h.state("a2") is None
    assert h.r.get(K.lock(m.lock_digest())) is None  # archiving releases the lock
    with pytest.raises(TaskNotFoundError):
        h.run(h.b.archive(Q, "a0", "tok00001", m, 10, MAX_AGE))
    h.enqueue("b")
    h.take()
    with pytest.raises(LeaseLostError):
        h.run(h.b.archive(Q, "b", "tok00001", h.msg("b"), 10, MAX_AGE, recover=True))  # lease alive
    with pytest.raises(LeaseLostError):
        h.run(h.b.archive(Q, "b", "nottoken", h.msg("b"), 10, MAX_AGE))


def test_trim_script(h: H) -> None:
    for i in range(3):
        h.enqueue(f"a{i}")
    h.take(3)
    for i in range(3):
        h.run(h.b.archive(Q, f"a{i}", "tok00001", h.msg(f"a{i}"), 100, MAX_AGE))
    assert h.run(h.b.trim(Q, 1, MAX_AGE)) == 2
    assert h.r.zrange(K.archived, 0, -1) == [b"a2"]
    assert h.r.hlen(K.tasks) == 1


def test_trim_archive_removes_at_most_100_per_call(h: H) -> None:
    """Issue 9: the archive limits delete at most 100 tasks per call in all (age and size
    together), as documented; it was up to 100 by age plus 100 by size."""
    h.run(h.b.enqueue_many(Q, [(f"a{i}", b"\x91\xa1t") for i in range(300)], False))
    h.take(300)
    for i in range(300):
        h.run(h.b.archive(Q, f"a{i}", "tok00001", h.msg(f"a{i}"), 1000, MAX_AGE))
    h.clock.advance(10)
    assert h.run(h.b.trim(Q, 0, 5000)) == 100  # every task is too old and over the size limit
    assert h.r.zcard(K.archived) == 200 and h.r.get(K.trimmed) == b"100"
    h.enqueue("b")
    h.take()
    h.run(h.b.archive(Q, "b", "tok00001", h.msg("b"), 0, 5000))  # the archive script trims the same way
    assert h.r.zcard(K.archived) == 101 and h.r.get(K.trimmed) == b"200"


def test_requeue_puts_task_at_the_front(h: H) -> None:
    h.enqueue("a")
    h.enqueue("b")
    h.take(1)
    with pytest.raises(LeaseLostError):
        h.run(h.b.requeue(Q, "a", "wrongtok"))
    with pytest.raises(TaskNotFoundError):
        h.run(h.b.requeue(Q, "zz", "tok00001"))
    assert h.run(h.b.requeue(Q, "a", "tok00001")) == 1
    assert h.state("a") == "p" and h.r.zcard(K.lease) == 0
    assert h.take(2) == ["a", "b"]
    assert h.r.get(K.processed) is None  # nothing counted


def test_extend_renews_only_held_leases(h: H) -> None:
    h.enqueue("a")
    h.enqueue("b")
    h.take(1, token="tokaaaaa", lease_ms=1000)
    h.take(1, token="tokbbbbb", lease_ms=1000)
    h.clock.advance(0.5)
    now, lost = h.run(h.b.extend(Q, 1000, [("a", "tokaaaaa"), ("b", "wrongtok"), ("c", "tokccccc")]))
    assert now == h.clock.t and lost == ["b", "c"]
    assert h.r.zscore(K.lease, "a") == h.clock.t + 1000
    assert h.r.zscore(K.lease, "b") == h.clock.t + 500


def test_forward_moves_due_tasks_and_reports_next(h: H) -> None:
    h.run(h.b.schedule(Q, "s1", Message("t"), 1000))
    h.run(h.b.schedule(Q, "s2", Message("t"), 3000))
    h.enqueue("r1")
    h.take()
    h.run(h.b.retry(Q, "r1", "tok00001", h.msg("r1"), 2000))
    h.r.delete(K.wake)
    assert h.run(h.b.forward(Q)) == (0, 1000)
    h.clock.advance(2)
    assert h.run(h.b.forward(Q)) == (2, 1000)
    assert h.state("s1") == "p" and h.state("r1") == "p" and h.state("s2") == "s"
    assert h.r.llen(K.wake) == 1
    h.clock.advance(5)
    assert h.run(h.b.forward(Q)) == (1, -1)
    assert h.take(5) == ["s1", "r1", "s2"]


def test_waits_are_finite_and_at_most_a_day(h: H) -> None:
    """Scores written by hand may be +-inf: the reply stayed "ms until inf" (fakeredis: OverflowError,
    a background loop failing for good; Redis: an undefined integer). Found by fuzzing."""
    inf = float("inf")
    for key, id in ((K.scheduled, "s"), (K.retry, "r"), (K.completed, "c"), (K.lease, "a")):
        h.r.zadd(key, {id: inf})
    assert h.run(h.b.forward(Q)) == (0, 86_400_000)
    assert h.run(h.b.expire(Q)) == (0, 86_400_000)
    assert h.run(h.b.expired(Q)).next_ms == 86_400_000
    h.run(h.b.schedule(Q, "far", Message("t"), 3 * 86_400_000))
    h.r.zrem(K.scheduled, "s")
    assert h.run(h.b.forward(Q)) == (0, 86_400_000)  # a far due time: the forwarder sleeps less anyway
    h.r.zadd(K.scheduled, {"s": -inf, "s2": -inf})  # due (no data: dropped), two of them past a batch of one
    assert h.run(h.b.forward(Q, 1)) == (0, 0)


def test_expired_and_drop(h: H) -> None:
    h.enqueue("a")
    h.enqueue("b")
    h.take(1, lease_ms=1000)
    h.take(1, lease_ms=5000)
    res = h.run(h.b.expired(Q))
    assert res.tasks == [] and res.next_ms == 1000
    h.clock.advance(1)
    res = h.run(h.b.expired(Q))
    assert [i for i, _ in res.tasks] == ["a"] and res.next_ms == 4000
    assert res.tasks[0][1][:1] == b"a"
    assert h.run(h.b.drop(Q, "a")) == -4  # task still active: retry/archive it instead
    h.r.hdel(K.tasks, "a")  # data lost by hand
    res = h.run(h.b.expired(Q))
    assert res.tasks == [("a", None)]
    assert h.run(h.b.drop(Q, "a")) == 1
    assert h.run(h.b.drop(Q, "a")) == 0
    h.r.hdel(K.tasks, "b")
    assert h.run(h.b.drop(Q, "b")) == -4  # lease alive


def test_stats_snapshot(h: H) -> None:
    h.enqueue("a")
    h.enqueue("b")
    h.run(h.b.schedule(Q, "s", Message("t"), 1000))
    h.take(1)
    h.run(h.b.pause(Q))
    s = h.run(h.b.stats(Q))
    assert (s.pending, s.active, s.scheduled, s.retry, s.archived, s.completed, s.paused) == (1, 1, 1, 0, 0, 0, True)
    assert s.size == 3


def test_scripts_reload_after_script_flush(h: H) -> None:
    """A restarted or fresh server has no scripts cached: EVALSHA falls back to EVAL."""
    h.r.script_flush()
    assert h.enqueue("a") == 1
    h.r.script_flush()
    results = h.x.run_many([h.b.enqueue(Q, "b", Message("t")), h.b.stats(Q)])
    assert results[0] == 1 and results[1].pending == 2


def test_enqueue_many_script_ids_checked_only_when_given(h: H) -> None:
    h.enqueue("live")
    h.enqueue("done")
    h.take(2)  # "live" and "done" are active now
    h.run(h.b.archive(Q, "done", "tok00001", h.msg("done"), 100, MAX_AGE))
    h.r.delete(K.wake)
    entries = [("n1", b"\x91\xa1t"), ("live", b"\x91\xa1t"), ("done", b"\x91\xa1t"), ("n1", b"\x91\xa1t")]
    refused = h.run(h.b.enqueue_many(Q, entries, check_ids=True))
    assert refused == [1, 3]  # a live id, and an id given twice in the batch
    assert h.state("live") == "a" and h.state("done") == "p" and h.r.zcard(K.archived) == 0
    assert h.r.lrange(K.pending, 0, -1) == [b"done", b"n1"]
    assert h.r.llen(K.wake) == 1
    assert h.run(h.b.enqueue_many(Q, [("g1", b"\x91\xa1t"), ("g2", b"\x91\xa1t")], check_ids=False)) == []
    assert h.take(10) == ["n1", "done", "g1", "g2"]  # FIFO across batches


def test_client_batch_mixes_paths_and_reports_per_item(backend: Any) -> None:
    from asynqpy import Client, TaskState

    c = Client(backend.sync)
    c.enqueue("t", None, task_id="taken")
    res = c.enqueue_many(
        [("a", 1), ("b", 2, {"task_id": "taken"}), ("c", 3, {"process_in": 60}), ("d", 4, {"unique": 60}),
         ("e", 5), ("f", 6, {"queue": "other"})],
        return_exceptions=True,
    )
    assert isinstance(res[1], TaskIdConflictError)
    assert [r.state for i, r in enumerate(res) if i != 1] == [TaskState.PENDING, TaskState.SCHEDULED] + [TaskState.PENDING] * 3
    assert len({r.id for i, r in enumerate(res) if i != 1}) == 5
    with pytest.raises(TaskIdConflictError):
        c.enqueue_many([("a", 1), ("b", 2)], task_id="taken")
    assert [x.decode() for x in backend.sync.lrange(K.pending, 0, -1)] == []  # queue q1 untouched
    assert backend.sync.llen(queue_keys("default").pending) == 4  # taken, a, d, e


def test_rewake_hands_a_token_back_only_when_tasks_wait(h: H) -> None:
    """rewake.lua: a worker that took a queue's wake token and will not act on it puts it back, if
    the queue has pending tasks; at most one token waits, as always."""
    assert h.run(h.b.rewake(Q)) == 0 and h.r.llen(K.wake) == 0  # nothing pending: nothing to wake for
    h.enqueue("a")
    assert h.r.lpop(K.wake) == b"1"  # an idle worker took the enqueue's token
    assert h.run(h.b.rewake(Q)) == 1 and h.r.llen(K.wake) == 1
    assert h.run(h.b.rewake(Q)) == 1 and h.r.llen(K.wake) == 1  # still one token
