"""Issue 42 #7, #9 and #11: a call sent again whatever the timing, and a worker restarted under the
same name. On fakeredis, redis-server and the Cluster.

#7: a call that stores a new task, sent again (its reply was lost) after the task it stored had
already ended: the kept completed input of an idempotent process call was replaced by a new copy,
which ran again (the process's history held the call's event twice). Every "resend recognises its
own write" path is checked against a write whose task completed, was archived, went to retry, and
one whose task is gone (its retention ended: the one case no store can see).

#11: the caller's own resends: ``on_conflict="return"`` raised TaskNotFoundError when the task
holding the id finished between the refusal and the read; an application sending an
``enqueue_many`` batch with its own ids again got TaskIdConflictError for its own stored copies.

#9: a worker restarted under the same name (the old process killed while it held a run of a
targeted task): the new process takes the run again once the old run's lease expired; the
old run's late success is refused, the new one counts once, and the task completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import (
    AsyncClient,
    Client,
    DuplicateTaskError,
    FakeClock,
    Input,
    Inspector,
    Process,
    ServeMux,
    Step,
    TaskIdConflictError,
    TaskState,
)
from asynqpy.core.model import codec
from asynqpy.core.model.errors import LeaseLostError
from asynqpy.core.processes.model import MIN_CALL_RETENTION_S
from asynqpy.core.spine.broker import Broker, Call
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.spine.stored import message_of, token_of
from asynqpy.redisio.executor import SyncExecutor

Q = "rs"
K = queue_keys(Q)


def _recording(client: Any) -> list[Call[Any]]:
    """The store calls ``client`` sends from now on (one per task: its own ``_one_call``), to send
    one of them again later as the connection would."""
    sent: list[Call[Any]] = []
    one = client._one_call

    def record(p: Any) -> Call[Any]:
        call = one(p)
        sent.append(call)
        return call

    client._one_call = record
    return sent


def _state(backend: Any, id: str) -> bytes | None:
    v = backend.sync.hget(K.tasks, id)
    return v[:1] if v else None


# -- #7: an idempotent process call sent again after it committed ---------------------------------

def _acct_mux(ran: list[Any]) -> ServeMux:
    mux = ServeMux()

    @mux.process("acct")
    def acct(p: Process, i: Input) -> Step:
        if i.kind == "init":
            return Step(state={"n": 0})
        ran.append(i.args)
        n = dict(p.state or {}).get("n", 0) + 1
        return Step(events=[{"call": i.args}], state={"n": n}, response=n)

    return mux


def test_an_idempotent_call_sent_again_after_it_committed_is_not_run_again(backend: Any) -> None:
    ran: list[Any] = []

    async def main() -> None:
        ac = AsyncClient(backend.new_async())
        sent = _recording(ac)
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            assert c.start_process("acct", "a1", None, queue=Q)
            async with serving(backend.new_async(), _acct_mux(ran), queues=[Q]):
                assert await ac.call_process("a1", "charge", queue=Q, timeout=10, idempotency_key="k1") == 1
                [store] = [call for call in sent if call.script == "enqueue_keyed"]
                input_id = store.args[0]
                assert _state(backend, input_id) == b"c"  # committed, kept for repeats
                kept = backend.sync.hget(K.tasks, input_id)
                # the connection sends the very same store call again, after the commit
                assert SyncExecutor(backend.sync).run(store) is TaskState.PENDING
                assert backend.sync.hget(K.tasks, input_id) == kept  # nothing written
                assert await ac.call_process("a1", "charge", queue=Q, timeout=10, idempotency_key="k1") == 1
                assert await ac.call_process("a1", "other", queue=Q, timeout=10) == 2  # the next call runs
                # a retention shorter than a resend may take is raised to MIN_CALL_RETENTION_S
                sent.clear()
                assert await ac.call_process("a1", "short", queue=Q, timeout=10, idempotency_key="k2",
                                             retention=1) == 3
                [short] = [call.args[0] for call in sent if call.script == "enqueue_keyed"]
                now_ms = int(time.time() * 1000)
                left = float(backend.sync.zscore(K.completed, short)) - now_ms
                assert left > (MIN_CALL_RETENTION_S - 60) * 1000, left
            p = insp.process(Q, "a1", first=1, count=100)
            assert [e.data for e in p.history] == [{"call": "charge"}, {"call": "other"}, {"call": "short"}]
            assert ran == ["charge", "other", "short"] and p.state == {"n": 3}
        await ac.close()

    asyncio.run(main())


def test_a_process_start_sent_again_answers_as_the_first(backend: Any) -> None:
    """Its own init input (a generated id) is found: True again, nothing written; before, a start
    sent again after a lost reply answered False ("it exists") for the process it had started."""
    with Client(backend.sync) as c:
        assert c.start_process("acct", "s1", None, queue=Q) is True
        [init] = [k for k, v in backend.sync.hgetall(K.tasks).items() if v[:1] in (b"p", b"b")]
        stored = backend.sync.hget(K.tasks, init)
        call = Broker().proc_start(Q, "s1", init.decode(), codec.decode(message_of(stored)))
        assert SyncExecutor(backend.sync).run(call) == 1  # the same call again: started
        assert backend.sync.hget(K.tasks, init) == stored and backend.sync.hlen(K.tasks) == 1
        assert c.start_process("acct", "s1", None, queue=Q) is False  # another start: it exists


# -- #7: every store path of a caller-chosen id, against a task that ended -------------------------

def _finish(backend: Any, b: Broker, id: str, how: str) -> None:
    """Run task ``id`` (pending, with any other pending one) and end it: 'c' completed (kept), 'x'
    archived, 'r' retry, 'd' done (deleted: nothing kept)."""
    ex = SyncExecutor(backend.sync)
    v = backend.sync.hget(K.tasks, id)
    if v[:1] != b"a":
        ex.run(b.dequeue(Q, 10, 30_000, "tokfin01"))
        v = backend.sync.hget(K.tasks, id)
    assert v[:1] == b"a", v
    msg = codec.decode(message_of(v))
    if how == "c":
        ex.run(b.complete(Q, id, "tokfin01", msg.with_(completed_at_ms=1, result=b"r", retention_ms=600_000)))
    elif how == "x":
        ex.run(b.archive(Q, id, "tokfin01", msg.with_(last_error="boom", retried=1), 100, 86_400_000))
    elif how == "r":
        ex.run(b.retry(Q, id, "tokfin01", msg.with_(last_error="boom", retried=1), 600_000))
    else:
        ex.run(b.done(Q, id, "tokfin01", msg))


@pytest.mark.parametrize("how", ["c", "x", "r"])
def test_an_enqueue_sent_again_after_its_task_ended_finds_its_own_task(backend: Any, how: str) -> None:
    b = Broker()
    with Client(backend.sync) as c:
        c.enqueue("warm-up", queue=Q)
        backend.sync.delete(K.pending, K.tasks)
        sent = _recording(c)
        info = c.enqueue("t", {"n": 1}, queue=Q, task_id="mine", retention=600)
        [store] = sent
        _finish(backend, b, "mine", how)
        kept = backend.sync.hget(K.tasks, "mine")
        assert SyncExecutor(backend.sync).run(store) == 1  # the same call again: its own task
        assert backend.sync.hget(K.tasks, "mine") == kept and backend.sync.llen(K.pending) == 0
        if how == "r":  # a live task: the application sending the same task again is no conflict
            again = c.enqueue("t", {"n": 1}, queue=Q, task_id="mine", retention=600)
            assert again.id == info.id and backend.sync.hget(K.tasks, "mine") == kept
            with pytest.raises(TaskIdConflictError):  # another task under the id still is
                c.enqueue("t", {"n": 2}, queue=Q, task_id="mine")
        else:  # a finished one: a new call (a later enqueue) replaces it, as documented
            c.enqueue("t", {"n": 1}, queue=Q, task_id="mine", retention=600, process_in=0)
            assert _state(backend, "mine") == b"p"


def test_an_enqueue_sent_again_after_its_task_was_deleted_stores_it_again(backend: Any) -> None:
    """The one case no store can recognise: the task ended and is gone (no retention, or its
    retention ended) before the copy ran: the copy is a new task (at-least-once, documented)."""
    b = Broker()
    with Client(backend.sync) as c:
        c.enqueue("warm-up", queue=Q)
        backend.sync.delete(K.pending, K.tasks)
        sent = _recording(c)
        c.enqueue("t", {"n": 1}, queue=Q, task_id="gone")
        [store] = sent
        _finish(backend, b, "gone", "d")
        assert _state(backend, "gone") is None
        assert SyncExecutor(backend.sync).run(store) == 1
        assert _state(backend, "gone") == b"p"


@pytest.mark.parametrize("how", ["c", "x", "r"])
def test_keyed_and_scheduled_stores_sent_again_after_their_task_ended(backend: Any, how: str) -> None:
    b = Broker()
    with Client(backend.sync) as c:
        c.enqueue("warm-up", queue=Q)
        backend.sync.delete(K.pending, K.tasks)
        sent = _recording(c)
        c.enqueue("t", 1, queue=Q, task_id="k1", key="acct:1", retention=600)
        c.enqueue("t", 2, queue=Q, task_id="s1", process_in=0.001, retention=600)
        store_k, store_s = sent
        backend.sync.delete(K.scheduled)
        backend.sync.hset(K.tasks, "s1", b"p" + message_of(backend.sync.hget(K.tasks, "s1")))
        backend.sync.lpush(K.pending, "s1")
        _finish(backend, b, "k1", how)
        _finish(backend, b, "s1", how)
        kept = backend.sync.hmget(K.tasks, ["k1", "s1"])
        ex = SyncExecutor(backend.sync)
        ex.run(store_k)
        ex.run(store_s)
        assert backend.sync.hmget(K.tasks, ["k1", "s1"]) == kept
        assert backend.sync.llen(K.pending) == 0 and backend.sync.zcard(K.blocked) == 0


# -- #11: the caller's own resends ------------------------------------------------------------------

@contextlib.contextmanager
def _after_refusal(c: Client, error: type[Exception], then: Any) -> Iterator[None]:
    """Run ``then`` as soon as one of the client's calls is refused with ``error`` (whether the
    executor raised it, or returned it among a pipeline's replies: a queue's registration and the
    store call go in one write), before the client sees the refusal."""
    run, run_many, run_many_now = c._exec.run, c._exec.run_many, c._exec.run_many_now

    def one(call: Any) -> Any:
        try:
            return run(call)
        except error:
            then()
            raise

    def refused(replies: Any) -> Any:
        if any(isinstance(r, error) for r in replies):
            then()
        return replies

    c._exec.run, c._exec.run_many = one, lambda calls: refused(run_many(calls))  # type: ignore[method-assign]
    c._exec.run_many_now = lambda calls: refused(run_many_now(calls))  # type: ignore[method-assign]
    try:
        yield
    finally:
        c._exec.run, c._exec.run_many, c._exec.run_many_now = run, run_many, run_many_now  # type: ignore[method-assign]


def test_on_conflict_return_when_the_holder_finishes_before_the_read(backend: Any) -> None:
    b = Broker()
    ex = SyncExecutor(backend.sync)
    with Client(backend.sync) as c:
        c.enqueue("t", {"n": 1}, queue=Q, task_id="job")
        finished: list[bool] = []

        def finish_holder() -> None:
            if not finished:  # the task holding the id ends now, between the refusal and the read
                finished.append(True)
                [(id, raw)] = ex.run(b.dequeue(Q, 1, 30_000, "tokhold1")).tasks
                ex.run(b.done(Q, id, "tokhold1", codec.decode(raw)))

        with _after_refusal(c, TaskIdConflictError, finish_holder):
            info = c.enqueue("t", {"n": 2}, queue=Q, task_id="job", on_conflict="return")
        assert finished  # (the refusal came)
        assert (info.id, info.payload, info.state) == ("job", {"n": 2}, TaskState.PENDING)
        assert codec.decode(message_of(backend.sync.hget(K.tasks, "job"))).payload == {"n": 2}


def test_on_conflict_return_when_the_unique_key_holder_finishes_before_the_read(backend: Any) -> None:
    b = Broker()
    ex = SyncExecutor(backend.sync)
    with Client(backend.sync) as c:
        c.enqueue("t", {"n": 1}, queue=Q, task_id="first", unique_key="u1")
        finished: list[bool] = []

        def finish_holder() -> None:
            if not finished:  # the key's holder ends now, between the refusal and the read
                finished.append(True)
                [(id, raw)] = ex.run(b.dequeue(Q, 1, 30_000, "tokhold2")).tasks
                ex.run(b.done(Q, id, "tokhold2", codec.decode(raw)))

        with _after_refusal(c, DuplicateTaskError, finish_holder):
            info = c.enqueue("t", {"n": 2}, queue=Q, task_id="second", unique_key="u1", on_conflict="return")
        assert finished
        assert (info.id, info.payload, info.state) == ("second", {"n": 2}, TaskState.PENDING)


def test_an_enqueue_many_batch_sent_again_by_the_application(backend: Any) -> None:
    b = Broker()
    ex = SyncExecutor(backend.sync)
    items = [("t", {"n": i}, {"task_id": f"own-{i}"}) for i in range(6)]
    keyed = [("t", {"n": i}, {"task_id": f"kown-{i}", "key": f"k{i % 2}"}) for i in range(4)]
    with Client(backend.sync) as c:
        first = c.enqueue_many(items, queue=Q, retention=600)
        c.enqueue_many(keyed, queue=Q, retention=600)
        got = ex.run(b.dequeue(Q, 4, 30_000, "tokbatch"))
        ids = [id for id, _ in got.tasks]
        for id, raw in got.tasks[:2]:  # two fail once: in retry, their stored message rewritten
            msg = codec.decode(raw)
            ex.run(b.retry(Q, id, "tokbatch", msg.with_(retried=1, last_error="boom"), 600_000))
        # the connection broke: the application sends the same batches again (new calls)
        again = c.enqueue_many(items, queue=Q, retention=600, return_exceptions=True)
        assert not [r for r in again if isinstance(r, Exception)], list(again)
        assert again.ids == first.ids
        keyed_again = c.enqueue_many(keyed, queue=Q, retention=600, return_exceptions=True)
        assert not [r for r in keyed_again if isinstance(r, Exception)], list(keyed_again)
        assert backend.sync.hlen(K.tasks) == 10 and len(ids) == 4
        # a different task under one of the ids is still a conflict
        other = c.enqueue_many([("t", {"n": 99}, {"task_id": "own-5"})], queue=Q, return_exceptions=True)
        assert isinstance(other[0], TaskIdConflictError)


# -- #9: a worker restarted under the same name ------------------------------------------------------

def test_a_worker_restarted_under_the_same_name_neither_counts_twice_nor_strands_the_task(backend: Any) -> None:
    clock = FakeClock()
    b, ex = Broker(clock), SyncExecutor(backend.sync)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        for workers in (None, ["w1", "w2"], ["w1", "w2", "w3"]):
            backend.sync.delete(K.runs, K.tasks, K.lease, K.targeted)
            t = c.enqueue("warm", None, queue=Q, runs=2, workers=workers, retention=600, max_retry=5)
            msg = codec.decode(message_of(backend.sync.hget(K.tasks, t.id)))
            run = f"{t.id}|w1"
            # w1 takes a run and is killed; a new w1 starts at once: the old lease still lives
            assert [id for id, _ in ex.run(b.dequeue(Q, 5, 1_000, "old00001", "w1")).tasks] == [run]
            assert ex.run(b.dequeue(Q, 5, 1_000, "new00001", "w1")).tasks == []
            clock.advance(2)  # the old lease expires: not taken again before the recoverer marks it
            assert ex.run(b.dequeue(Q, 5, 1_000, "new00001", "w1")).tasks == []
            [(expired, value)] = ex.run(b.expired(Q)).tasks
            assert expired == run
            ex.run(b.run_end(Q, t.id, msg, "e", run=run, token=token_of(value).decode(), recover=True, failed=msg))
            assert insp.task_info(Q, t.id).runs == {"w1": "lease expired"}
            assert [id for id, _ in ex.run(b.dequeue(Q, 5, 1_000, "new00002", "w1")).tasks] == [run]
            record = backend.sync.hget(K.runs, t.id).decode()
            assert record.count("w1=") == 1, record  # one entry per worker name
            # both report success: the old run's is refused (its lease is gone), the new one counts
            with pytest.raises(LeaseLostError):
                ex.run(b.run_end(Q, t.id, msg, "s", run=run, token="old00001"))
            assert ex.run(b.run_end(Q, t.id, msg, "s", run=run, token="new00002")) == (1, "m")
            record = backend.sync.hget(K.runs, t.id).decode()
            assert record.count("w1=") == 1 and "w1=s" in record, record
            assert ex.run(b.dequeue(Q, 5, 1_000, "new00003", "w1")).tasks == []  # never a second success
            got = ex.run(b.dequeue(Q, 5, 1_000, "w2000001", "w2")).tasks
            assert [id for id, _ in got] == [f"{t.id}|w2"]
            assert ex.run(b.run_end(Q, t.id, msg, "s", run=f"{t.id}|w2", token="w2000001")) == (1, "c")
            info = insp.task_info(Q, t.id)
            assert info.state is TaskState.COMPLETED and info.runs == {"w1": "succeeded", "w2": "succeeded"}
            events = [(e.worker, e.outcome) for e in insp.events(Q) if e.event == "run" and e.task_id == t.id]
            assert events == [("w1", "lease expired"), ("w1", "succeeded"), ("w2", "succeeded")]


def test_a_restarted_worker_of_the_same_name_runs_the_task_to_completion(backend: Any) -> None:
    """The same with servers of more than four queues (the fetch then dequeues a queue only on its
    wake token): a "w1" holding a run dies (its run is left leased); "w2" takes the other run and
    succeeds; a new "w1" starts. The recoverer marks w1's run expired: the queue's wake token went
    to w2, which cannot take the run, and the new w1 never looked at the queue again (the task
    stayed targeted for good). The expired run's worker is now woken on its own wake list."""
    ran: list[str] = []
    mux = ServeMux()
    queues = [Q, *(f"{Q}-{i}" for i in range(5))]

    @mux.handle("warm")
    async def warm(task: Any) -> None:
        ran.append(task.id.rpartition("|")[2])

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            t = c.enqueue("warm", None, queue=Q, runs=2, retention=600)
            got = SyncExecutor(backend.sync).run(Broker().dequeue(Q, 5, 1_000, "dead0001", "w1"))
            assert [id for id, _ in got.tasks] == [f"{t.id}|w1"]  # the killed process's run
            async with serving(backend.new_async(), mux, queues=queues, name="w2", recover_interval=0.1):
                await until(lambda: insp.task_info(Q, t.id).runs.get("w2") == "succeeded")
                async with serving(backend.new_async(), mux, queues=queues, name="w1", recover_interval=0.1):
                    await until(lambda: insp.task_info(Q, t.id).state is TaskState.COMPLETED, timeout=20)
            assert sorted(ran) == ["w1", "w2"]
            assert insp.task_info(Q, t.id).runs == {"w1": "succeeded", "w2": "succeeded"}

    asyncio.run(main())
