"""Targeted tasks: ``workers=[...]`` (only those workers may run the task) and ``runs=N`` (N distinct
workers must each run it successfully), worker names, per-worker run states, changing the allowed
workers of a waiting or running task, failures, lease expiry, typed refusals. On fakeredis,
redis-server and the cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
from helpers import serving, until

from asynqpy import (
    Client,
    Inspector,
    InvalidArgumentError,
    ServeMux,
    Task,
    TaskNotFoundError,
    TaskState,
    TaskStateError,
)
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

Q = "tq"


def _recording_mux(ran: list[str], fail_on: set[str] | None = None, hold: asyncio.Event | None = None) -> ServeMux:
    mux = ServeMux()

    @mux.handle("warm")
    async def warm(task: Task) -> None:
        worker = task.id.rpartition("|")[2]
        ran.append(worker)
        if hold is not None:
            await hold.wait()
        if fail_on and worker in fail_on:
            raise RuntimeError(f"no cache on {worker}")

    return mux


def test_only_the_named_workers_run_a_targeted_task(backend: Any) -> None:
    ran: list[str] = []

    async def main() -> None:
        mux = _recording_mux(ran)
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), mux, queues=[Q], name="gpu-1"), \
                    serving(backend.new_async(), mux, queues=[Q], name="cpu-1"), \
                    serving(backend.new_async(), mux, queues=[Q], name="cpu-2"):
                infos = [c.enqueue("warm", i, queue=Q, workers=["gpu-1"]) for i in range(5)]
                assert all(i.state is TaskState.TARGETED and i.workers == ["gpu-1"] for i in infos)
                await until(lambda: insp.queue_info(Q).processed_total == 5)
                names = {s.name for s in insp.servers()}
                assert {"gpu-1", "cpu-1", "cpu-2"} <= names
            assert ran == ["gpu-1"] * 5
            info = insp.queue_info(Q)
            assert (info.targeted, info.pending, info.active) == (0, 0, 0)

    asyncio.run(main())


def test_runs_need_that_many_distinct_workers(backend: Any) -> None:
    ran: list[str] = []

    async def main() -> None:
        hold = asyncio.Event()
        mux = _recording_mux(ran, hold=hold)
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            servers = [serving(backend.new_async(), mux, queues=[Q], name=f"w{i}", concurrency=3) for i in range(4)]
            for s in servers:
                await s.__aenter__()
            try:
                t = c.enqueue("warm", None, queue=Q, runs=3, retention=600)
                await until(lambda: len(ran) == 3)
                held = insp.task_info(Q, t.id)
                assert held.state is TaskState.TARGETED and held.runs_wanted == 3
                assert sorted(held.runs.values()) == ["running"] * 3 and len(set(ran)) == 3
                assert insp.queue_info(Q).active == 3
                await asyncio.sleep(0.3)
                assert len(ran) == 3  # at most N at once: the fourth worker does not join
                hold.set()
                await until(lambda: insp.task_info(Q, t.id).state is TaskState.COMPLETED)
            finally:
                for s in servers:
                    await s.__aexit__(None, None, None)
            assert len(ran) == 3 and len(set(ran)) == 3  # never twice on the same worker
            events = [e for e in insp.events(Q) if e.event == "run"]
            assert [e.outcome for e in events] == ["succeeded"] * 3 and len({e.worker for e in events}) == 3

    asyncio.run(main())


def test_a_failed_run_is_replaced_by_another_worker_and_too_many_archive_the_task(backend: Any) -> None:
    ran: list[str] = []

    async def main() -> None:
        mux = _recording_mux(ran, fail_on={"w0", "w1"})
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), mux, queues=[Q], name="w0"), \
                    serving(backend.new_async(), mux, queues=[Q], name="w1"), \
                    serving(backend.new_async(), mux, queues=[Q], name="w2"), \
                    serving(backend.new_async(), mux, queues=[Q], name="w3"):
                ok = c.enqueue("warm", None, queue=Q, runs=2, max_retry=2, retention=600)
                await until(lambda: insp.task_info(Q, ok.id).state is TaskState.COMPLETED)
                # only w2 and w3 can succeed: both did; a worker that failed was replaced, never re-run
                assert {"w2", "w3"} <= set(ran) and len(ran) == len(set(ran))
                ran.clear()
                # only w2 of the three named can succeed: w0 and w1 both fail, over max_retry=1
                bad = c.enqueue("warm", None, queue=Q, workers=["w0", "w1", "w2"], runs=2, max_retry=1)
                await until(lambda: insp.task_info(Q, bad.id).state is TaskState.ARCHIVED)
                info = insp.task_info(Q, bad.id)
                assert "no cache on w" in info.last_error and {"w0", "w1"} <= set(ran) and "w3" not in ran

    asyncio.run(main())


def test_changing_the_workers_moves_a_waiting_task_and_recalls_a_running_run(backend: Any) -> None:
    ran: list[str] = []

    async def main() -> None:
        hold = asyncio.Event()
        mux = _recording_mux(ran, hold=hold)
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            waiting = c.enqueue("warm", "w", queue=Q, workers=["nobody"])
            async with serving(backend.new_async(), mux, queues=[Q], name="a", heartbeat_interval=0.2), \
                    serving(backend.new_async(), mux, queues=[Q], name="b", heartbeat_interval=0.2):
                await asyncio.sleep(0.3)
                assert ran == [] and insp.task_info(Q, waiting.id).state is TaskState.TARGETED
                insp.set_workers(Q, waiting.id, ["a"])  # wakes "a" at once
                await until(lambda: ran == ["a"])
                info = insp.task_info(Q, waiting.id)
                assert info.runs == {"a": "running"} and info.workers == ["a"]
                insp.set_workers(Q, waiting.id, ["b"])  # "a" gives it back at its next heartbeat
                await until(lambda: ran == ["a", "b"], timeout=5)
                assert insp.task_info(Q, waiting.id).runs == {"b": "running"}
                hold.set()
                await until(lambda: insp.queue_info(Q).targeted == 0)
            with pytest.raises(TaskStateError, match="only a targeted task"):
                plain = c.enqueue("warm", None, queue=Q, process_in=60)
                insp.set_workers(Q, plain.id, ["a"])
            with pytest.raises(TaskNotFoundError):
                insp.set_workers(Q, waiting.id, ["a"])

    asyncio.run(main())


def test_an_expired_run_is_marked_and_replaced(backend: Any) -> None:
    ran: list[str] = []

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            t = c.enqueue("warm", None, queue=Q, workers=["ghost", "live"], retention=600)
            # a worker named "ghost" takes the run and dies: its lease runs out
            got = SyncExecutor(backend.sync).run(Broker().dequeue(Q, 5, 200, "tok00001", "ghost"))
            assert [id for id, _ in got.tasks] == [f"{t.id}|ghost"]
            assert insp.task_info(Q, t.id).runs == {"ghost": "running"}
            async with serving(backend.new_async(), _recording_mux(ran), queues=[Q], name="live",
                               recover_interval=0.1):
                await until(lambda: insp.task_info(Q, t.id).state is TaskState.COMPLETED)
            assert ran == ["live"]
            events = {(e.worker, e.outcome) for e in insp.events(Q) if e.event == "run"}
            assert events == {("ghost", "lease expired"), ("live", "succeeded")}

    asyncio.run(main())


def test_delete_and_archive_targeted_tasks_and_refusals(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        a = c.enqueue("warm", 1, queue=Q, workers=["x", "y"], runs=2, unique_key="warm:1")
        b = c.enqueue("warm", 2, queue=Q, runs=5)
        c.enqueue("warm", 3, queue=Q, workers=["z"])
        assert [t.id for t in insp.list_tasks(Q, TaskState.TARGETED)] == [a.id, b.id, insp.list_tasks(
            Q, "targeted")[2].id]
        insp.archive_task(Q, a.id)
        assert insp.task_info(Q, a.id).state is TaskState.ARCHIVED
        c.enqueue("warm", 1, queue=Q, workers=["x"], unique_key="warm:1")  # its key was released
        insp.delete_task(Q, b.id)
        with pytest.raises(TaskNotFoundError):
            insp.task_info(Q, b.id)
        assert insp.delete_all(Q, TaskState.TARGETED) == 2
        q = queue_keys(Q)
        assert not backend.sync.exists(q.targeted) and not backend.sync.exists(q.runs)
        c.enqueue("warm", 9, queue=Q, workers=["z"])
        for kwargs, match in [
            ({"workers": "gpu-1"}, "workers must be a non-empty list"),
            ({"workers": []}, "workers must be a non-empty list"),
            ({"workers": ["has space"]}, "invalid worker name"),
            ({"workers": ["a|b"]}, "invalid worker name"),
            ({"runs": 0}, "runs must be an int from 1 to 1000"),
            ({"runs": True}, "runs must be an int"),
            ({"runs": 3, "workers": ["a", "b"]}, "could never complete"),
            ({"runs": 2, "process_in": 5}, "not with group, process_at"),
            ({"workers": ["a"], "group": "g"}, "not with group"),
            ({"workers": ["a"], "priority": 9}, "cannot have a"),  # issue 29 #8: it was ignored
            ({"runs": 2, "priority": 0}, "cannot have a"),
        ]:
            with pytest.raises(InvalidArgumentError, match=match):
                c.enqueue("warm", queue=Q, **kwargs)
        with pytest.raises(InvalidArgumentError, match="has a result per run"):
            c.call("warm", queue=Q, runs=2, timeout=1)
        assert insp.queue_info(Q).targeted == 1  # nothing queued was lost to the refusals


def test_any_worker_is_refused_for_a_task_of_one_run_and_taken_for_one_of_several(backend: Any) -> None:
    """Found by fuzzing the model plus (2026-12-01): ``set_workers(q, id, None)`` on a task of one
    run gave it a message that no longer said it was targeted (no workers, one run), so its run
    was taken for an ordinary task whose id holds a bar: the worker's end wrote nothing of the
    run, and the task waited forever with that worker "running". A task of one run now keeps
    naming workers (InvalidArgumentError, nothing changes); one of several runs takes None, and
    its runs end as runs."""
    ran: list[str] = []

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            one = c.enqueue("warm", "one", queue=Q, workers=["a", "b"])
            with pytest.raises(InvalidArgumentError, match="keep naming workers"):
                insp.set_workers(Q, one.id, None)
            info = insp.task_info(Q, one.id)
            assert info.state is TaskState.TARGETED and info.workers == ["a", "b"]
            two = c.enqueue("warm", "two", queue=Q, workers=["a", "c"], runs=2)
            with pytest.raises(InvalidArgumentError, match="needs 2 distinct workers"):
                insp.set_workers(Q, two.id, ["a"])
            assert insp.set_workers(Q, two.id, None).workers is None
            insp.set_workers(Q, one.id, ["b"])
            async with serving(backend.new_async(), _recording_mux(ran), queues=[Q], name="a"), \
                    serving(backend.new_async(), _recording_mux(ran), queues=[Q], name="b"):
                await until(lambda: insp.queue_info(Q).targeted == 0)
            assert sorted(ran) == ["a", "b", "b"]  # each task's runs ended as runs: both done

    asyncio.run(main())


def test_cli_enqueue_inspect_and_edit_targeted_tasks(redis_url: str) -> None:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    def cli(*args: str) -> tuple[int, str, str]:
        res = CliRunner().invoke(main, [*args, "--redis-url", redis_url])
        return res.exit_code, res.stdout, res.stderr

    code, out, err = cli("enqueue", "warm", "-q", Q, "--runs", "2", "--workers", "a,b,c", "--task-id", "t1")
    assert code == 0 and out.startswith("enqueued t1 to tq: targeted"), err
    code, out, err = cli("enqueue", "warm", "-q", Q, "--workers", "a", "--task-id", "t0")  # one run
    assert code == 0, err
    SyncExecutor(redis.Redis.from_url(redis_url)).run(Broker().dequeue(Q, 1, 30_000, "tok00001", "b"))
    code, out, _ = cli("task", "inspect", "-q", Q, "--id", "t1")
    assert code == 0 and "workers" in out and "a, b, c" in out and "2 distinct worker(s)" in out
    assert "run on b" in out and "running" in out
    code, out, _ = cli("task", "edit", "-q", Q, "--id", "t1", "--workers", "a,c,d")
    assert code == 0 and "edited task t1" in out
    with Inspector(redis_url) as insp:
        assert insp.task_info(Q, "t1").workers == ["a", "c", "d"]
    code, out, _ = cli("task", "ls", "-q", Q, "-s", "targeted")
    assert code == 0 and "t1" in out
    for args, message in [
        (("enqueue", "warm", "-q", Q, "--runs", "3", "--workers", "a,b"), "could never complete"),
        (("enqueue", "warm", "-q", Q, "--workers", "bad name"), "invalid worker name"),
        (("task", "edit", "-q", Q, "--id", "t1", "--workers", "a", "--max-retry", "2"), "give it alone"),
        (("task", "edit", "-q", Q, "--id", "t0", "--workers", "*"), "keep naming workers"),
        (("worker", "x:mux", "--name", "a|b"), "--name: invalid worker name"),
        (("enqueue", "warm", "-q", Q, "--workers", "a", "--priority", "9"), "cannot have a"),
    ]:
        code, _, err = cli(*args)
        assert code == 2 and err.startswith("asynqpy: error: ") and message in err and err.count("\n") == 1, err


def test_a_plain_task_whose_id_holds_a_bar_is_not_taken_for_a_run_at_lease_renewal(backend: Any) -> None:
    """Issue 29 #9: extend took any id holding '|' for a run of a targeted task: a plain task
    'x|y' whose prefix 'x' is a targeted task that no longer allows worker 'y' was deleted at its
    heartbeat and reported lost. The worker now says which leases are runs (and of which task)."""
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("warm", None, queue=Q, workers=["w1"], task_id="x")
        backend.sync.hset(queue_keys(Q).runs, "x", "1 w1 0 y=f:1")  # 'y' failed a run, then left the list
        c.enqueue("plain", None, queue=Q, task_id="x|y")
        got = ex.run(b.dequeue(Q, 5, 30_000, "tok00001"))
        assert [id for id, _ in got.tasks] == ["x|y"]
        _, lost = ex.run(b.extend(Q, 30_000, [("x|y", "tok00001", "")]))
        assert lost == []
        assert insp.task_info(Q, "x|y").state is TaskState.ACTIVE
        assert insp.task_info(Q, "x").runs == {"y": "failed"}


def test_a_run_of_a_deleted_task_is_not_credited_to_a_new_task_under_its_id(backend: Any) -> None:
    """Issue 29 #9: a run still running when its targeted task was deleted, ending after a new
    targeted task was stored under the same (caller-chosen) id, was counted as the new task's run
    (it could even complete it). A run now changes a record only where its worker is running."""
    ex, b = SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("warm", 1, queue=Q, runs=2, task_id="job", retention=600)
        got = ex.run(b.dequeue(Q, 5, 30_000, "tok00001", "w1"))
        [(run, raw)] = got.tasks
        assert run == "job|w1"
        insp.delete_task(Q, "job")  # the run goes on
        c.enqueue("warm", 2, queue=Q, workers=["w1"], task_id="job", retention=600)
        msg = insp.task_info(Q, "job")
        assert msg.state is TaskState.TARGETED
        from asynqpy.core.model import codec
        code, state = ex.run(b.run_end(Q, "job", codec.decode(raw), "s", run=run, token="tok00001"))
        assert (code, state) == (1, "")
        info = insp.task_info(Q, "job")
        assert info.state is TaskState.TARGETED and info.runs == {} and info.payload == 2
        assert not backend.sync.hexists(queue_keys(Q).tasks, run)  # the old run is gone


def test_a_run_id_still_leased_by_a_deleted_tasks_run_is_not_handed_out_again(backend: Any) -> None:
    """Found by fuzzing the model (2026-12-01): a targeted task whose run on w2 was going on was
    deleted and stored again under its id; w2's next dequeue handed it the new task's run under
    the same run id, whose lease entry the old run held: two runs in one lease entry, one slot
    counted for both (the dequeue said the queue's limit was reached while a slot was free, and
    left no worker woken for the pending task). The run id waits until the old run ended."""
    ex, b = SyncExecutor(backend.sync), Broker()
    q = queue_keys(Q)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("warm", 1, queue=Q, runs=2, task_id="job")
        [(run, raw)] = ex.run(b.dequeue(Q, 5, 30_000, "tok00001", "w2")).tasks
        assert run == "job|w2"
        insp.delete_task(Q, "job")  # the old run goes on
        c.enqueue("warm", 2, queue=Q, runs=2, task_id="job")
        assert ex.run(b.dequeue(Q, 5, 30_000, "tok00002", "w2")).tasks == []  # not while the old run holds its id
        assert [i for i, _ in ex.run(b.dequeue(Q, 5, 30_000, "tok00003", "w1")).tasks] == ["job|w1"]
        from asynqpy.core.model import codec
        assert ex.run(b.run_end(Q, "job", codec.decode(raw), "s", run=run, token="tok00001")) == (1, "")
        assert [i for i, _ in ex.run(b.dequeue(Q, 5, 30_000, "tok00004", "w2")).tasks] == ["job|w2"]
        assert backend.sync.zcard(q.lease) == 2 and insp.task_info(Q, "job").runs == {"w1": "running", "w2": "running"}


def _named_mux(fail_on: set[str]) -> ServeMux:
    mux = ServeMux()

    @mux.handle("warm")
    async def warm(task: Task) -> str:
        worker = task.id.rpartition("|")[2]
        if worker in fail_on:
            raise RuntimeError(f"no cache on {worker}")
        return f"warm on {worker}"

    return mux


def test_a_finished_targeted_task_keeps_its_result_and_runs_record(backend: Any) -> None:
    """Issue 29 #8: a completed targeted task kept no result even with retention, and its
    per-worker runs record and failure count were lost when it completed or was archived. Kept
    now: the result of the run that completed it, and the final record, as long as the task."""
    mux = _named_mux({"w0"})
    q = queue_keys(Q)

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            ok = c.enqueue("warm", None, queue=Q, workers=["w0", "w1", "w2"], runs=2, max_retry=5, retention=600)
            bad = c.enqueue("warm", None, queue=Q, workers=["w0"], max_retry=0)
            gone = c.enqueue("warm", None, queue=Q, workers=["w1"])  # no retention: nothing is kept
            async with serving(backend.new_async(), mux, queues=[Q], name="w0"):
                await until(lambda: insp.task_info(Q, ok.id).runs == {"w0": "failed"})
                await until(lambda: insp.task_info(Q, bad.id).state is TaskState.ARCHIVED)
            async with serving(backend.new_async(), mux, queues=[Q], name="w1"), \
                    serving(backend.new_async(), mux, queues=[Q], name="w2"):
                await until(lambda: insp.task_info(Q, ok.id).state is TaskState.COMPLETED)
                await until(lambda: not backend.sync.hexists(q.tasks, gone.id))
            info = insp.task_info(Q, ok.id)
            assert info.runs == {"w0": "failed", "w1": "succeeded", "w2": "succeeded"} and info.retried == 1
            assert info.result in ("warm on w1", "warm on w2")  # the run that completed it
            assert info.run_results == {"w1": "warm on w1", "w2": "warm on w2"}  # and each run's
            assert 0 < backend.sync.pttl(q.ran(ok.id)) <= 600_000  # kept as long as the task
            failed = insp.task_info(Q, bad.id)
            assert failed.runs == {"w0": "failed"} and failed.retried == 1 and "no cache on w0" in failed.last_error
            assert not backend.sync.exists(q.ran(gone.id))
            insp.delete_task(Q, ok.id)  # (what deleting a kept task leaves expires with its retention)
            c.enqueue("warm", None, queue=Q, task_id=ok.id, retention=600)  # a plain task, same id
            assert insp.task_info(Q, ok.id).runs == {}

    asyncio.run(main())


def test_run_results_of_an_earlier_task_under_the_same_id_are_not_shown(backend: Any) -> None:
    """What an archived targeted task kept (its record, its runs' results) is not shown for a new
    targeted task stored under its id: only runs the new task's record says succeeded."""
    ex, b = SyncExecutor(backend.sync), Broker()
    from asynqpy.core.model import codec

    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("warm", 1, queue=Q, runs=2, task_id="again", retention=600)
        [(run, raw)] = ex.run(b.dequeue(Q, 5, 30_000, "tok00001", "w1")).tasks
        ex.run(b.run_end(Q, "again", codec.decode(raw), "s", run=run, token="tok00001", result="old"))
        insp.archive_task(Q, "again")
        assert insp.task_info(Q, "again").run_results == {"w1": "old"}  # kept with the archived task
        insp.delete_task(Q, "again")
        c.enqueue("warm", 2, queue=Q, runs=2, task_id="again", retention=600)
        assert insp.task_info(Q, "again").run_results == {}


@pytest.mark.parametrize("outcome", ["s", "f", "e"])
def test_a_run_that_ends_frees_its_concurrency_slot_and_wakes_a_held_back_worker(backend: Any, outcome: str) -> None:
    """Found by the cross-feature model (tests/test_model.py): a targeted task's run holds a
    concurrency slot like any active task, but its end (run_end: a worker's success or failure,
    or the recoverer's lease expiry) left no wake token, so a worker the limit held back slept
    until its next poll though a slot was free and tasks were pending. The exit include's slot
    duty now runs for runs too (tests/mutants/targeted_slot.patch reverts it)."""
    from asynqpy.core.model import codec

    ex, b, k = SyncExecutor(backend.sync), Broker(), queue_keys(Q)
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        insp.set_limits(Q, concurrency=1)
        c.enqueue("warm", None, queue=Q, workers=["w1"], task_id="job", retention=600, max_retry=5)
        lease_ms = 1 if outcome == "e" else 30_000  # (the recoverer ends only an expired lease)
        [(run, raw)] = ex.run(b.dequeue(Q, 1, lease_ms, "tok00001", "w1")).tasks
        assert run == "job|w1"
        c.enqueue("plain", None, queue=Q)
        time.sleep(0.01)
        held = ex.run(b.dequeue(Q, 1, 30_000, "tok00002", "w2"))  # the slot is taken: held back
        assert held.tasks == [] and held.slot_bound
        backend.sync.delete(k.wake)
        msg = codec.decode(raw)
        failed = msg.with_(last_error="boom") if outcome != "s" else None
        ex.run(b.run_end(Q, "job", msg, outcome, run=run, token="tok00001", recover=outcome == "e", failed=failed))
        assert backend.sync.llen(k.wake) > 0, "a slot is free and a task is pending, but no worker is woken"
        got = ex.run(b.dequeue(Q, 1, 30_000, "tok00003", "w2"))
        assert [id for id, _ in got.tasks] and not got.slot_bound
