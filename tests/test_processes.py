"""Multi-process behaviour on a real redis-server: throughput with exactly-once execution in a
crash-free run, SIGKILL recovery, graceful shutdown, the supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import redis
from helpers import start_worker, wait_sync

from asynqpy import Client, Inspector
from asynqpy.core.spine.broker import Broker
from asynqpy.redisio.executor import SyncExecutor

pytestmark = [pytest.mark.real, pytest.mark.slow]


def _db1(url: str) -> redis.Redis:
    return redis.Redis.from_url(url.rsplit("/", 1)[0] + "/1")


def _stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def test_2000_tasks_4_processes_each_runs_exactly_once(redis_url: str) -> None:
    n = 2_000  # 80 handlers in 4 processes, each task dequeued in a race with 79 others (10 000 cost 17 s of
    # CPU, 4 000 7 to 11 s: the suite's budget, issue 43; 25 batches of 80 still race)
    db1 = _db1(redis_url)
    db1.flushdb()
    with Client(redis_url) as client:
        ids = []
        for start in range(0, n, 1000):
            ids += [i.id for i in client.enqueue_many([("count", None)] * 1000)]
    stats = Broker()
    x = SyncExecutor(redis.Redis.from_url(redis_url))
    sup = start_worker(redis_url, "workers:mux", "--processes", "4", "--concurrency", "20",
                       env={"ASYNQPY_TEST_URL": redis_url})
    samples = 0
    try:
        deadline = time.monotonic() + 120
        while True:
            s = x.run(stats.stats("default"))
            # counts per state add up at every sampled moment (one atomic snapshot per sample)
            assert s.pending + s.active + s.processed == n, s
            assert s.failed == 0 and s.retry == 0 and s.archived == 0
            samples += 1
            if s.processed == n:
                break
            assert time.monotonic() < deadline, f"not drained: {s}"
            time.sleep(0.05)
    finally:
        assert _stop(sup) == 0
    runs = db1.hgetall("runs")
    assert len(runs) == n and set(runs) == {i.encode() for i in ids}
    assert set(runs.values()) == {b"1"}, "some handler ran more than once"
    assert samples > 3


def test_sigkill_mid_task_reruns_after_lease_expiry(redis_url: str) -> None:
    db1 = _db1(redis_url)
    db1.flushdb()
    env = {"ASYNQPY_TEST_URL": redis_url}
    with Client(redis_url) as client:
        victim = client.enqueue("block", None, retention=300).id
        a = start_worker(redis_url, "workers:mux", "--concurrency", "1", "--lease", "2",
                         "--heartbeat-interval", "0.3", env=env)
        try:
            wait_sync(lambda: db1.sismember("started", victim), 15)
        finally:
            a.kill()  # SIGKILL: no shutdown, the lease stays behind
            a.wait()
        killed_at = time.monotonic()
        others = [i.id for i in client.enqueue_many([("count", None)] * 100)]
    b = start_worker(redis_url, "workers:mux", "--concurrency", "10", "--lease", "2",
                     "--heartbeat-interval", "0.3", env=env)
    insp = Inspector(redis_url)
    try:
        # the recovery is timed from when b serves (its heartbeat lists its pid), if that is after
        # the kill: b's interpreter start took 3 to 17 s on a loaded machine, which timed the
        # machine, not the recovery (the assertion below failed so under load)
        wait_sync(lambda: any(s.pid == b.pid for s in insp.servers()), 30)
        serving_at = time.monotonic()
        wait_sync(lambda: db1.hget("runs", victim) == b"2" and db1.hlen("runs") == 101, 20)
        wait_sync(lambda: insp.task_info("default", victim).state.value == "completed", 10)
        recovered_in = time.monotonic() - max(killed_at, serving_at)
    finally:
        assert _stop(b) == 0
    info = insp.task_info("default", victim)
    assert info.retried == 1 and "lease expired" in info.last_error
    assert recovered_in < 2 + 5  # lease (2 s) + recoverer wake-up + a run, not minutes
    runs = db1.hgetall("runs")
    assert all(runs[i.encode()] == b"1" for i in others)
    s = insp.stats("default")
    assert (s.pending, s.active, s.retry, s.archived) == (0, 0, 0, 0)


@pytest.mark.parametrize("kind", ["block", "block_sync"])
def test_graceful_shutdown_requeues_running_tasks(redis_url: str, kind: str) -> None:
    db1 = _db1(redis_url)
    db1.flushdb()
    env = {"ASYNQPY_TEST_URL": redis_url}
    with Client(redis_url) as client:
        ids = [i.id for i in client.enqueue_many([(kind, None)] * 3)]
    w = start_worker(redis_url, "workers:mux", "--concurrency", "5", "--shutdown-timeout", "0.5", env=env)
    try:
        wait_sync(lambda: db1.scard("started") == 3, 15)
    finally:
        t0 = time.monotonic()
        assert _stop(w) == 0
    assert time.monotonic() - t0 < 5
    insp = Inspector(redis_url)
    s = insp.stats("default")
    assert (s.pending, s.active, s.processed, s.failed) == (3, 0, 0, 0)
    for id in ids:
        info = insp.task_info("default", id)
        assert info.state.value == "pending" and info.retried == 0
    db1.set("release", 1)
    w = start_worker(redis_url, "workers:mux", "--concurrency", "5", env=env)
    try:
        wait_sync(lambda: insp.stats("default").processed == 3, 15)
    finally:
        assert _stop(w) == 0
    s = insp.stats("default")
    assert (s.pending, s.active, s.processed, s.failed) == (0, 0, 3, 0)
    assert {db1.hget("runs", i) for i in ids} == {b"2"}


def test_a_handler_that_ignores_cancellation_does_not_keep_the_worker_alive(redis_url: str) -> None:
    """A stop once failed under load: a handler whose cancellation was swallowed (redis-py can
    swallow one that arrives as a command starts) kept asyncio.run waiting for it at exit. The
    worker now gives leftover tasks STOP_LOOPS_TIMEOUT (3 s) after its shutdown, then exits; the
    task was put back to its queue already."""
    db1 = _db1(redis_url)
    db1.flushdb()
    with Client(redis_url) as client:
        id = client.enqueue("stubborn").id
    w = start_worker(redis_url, "workers:mux", "--shutdown-timeout", "0.5", env={"ASYNQPY_TEST_URL": redis_url})
    try:
        wait_sync(lambda: db1.scard("started") == 1, 15)
    finally:
        t0 = time.monotonic()
        assert _stop(w) == 0
    assert time.monotonic() - t0 < 8
    assert Inspector(redis_url).task_info("default", id).state.value == "pending"


def test_supervisor_restarts_a_crashed_child(redis_url: str) -> None:
    db1 = _db1(redis_url)
    db1.flushdb()
    env = {"ASYNQPY_TEST_URL": redis_url}
    sup = start_worker(redis_url, "workers:mux", "--processes", "2", "--lease", "2",
                       "--heartbeat-interval", "0.3", env=env)
    r = redis.Redis.from_url(redis_url)
    try:
        wait_sync(lambda: r.zcard("asynqpy:servers") == 2, 15)
        child = int(r.zrange("asynqpy:servers", 0, 0)[0].decode().split(":")[1])
        os.kill(child, signal.SIGKILL)
        # a new child registers; the killed one's heartbeat entry expires
        wait_sync(lambda: any(int(m.decode().split(":")[1]) not in (child,) for m in r.zrange("asynqpy:servers", 0, -1))
                  and len({m for m in r.zrange("asynqpy:servers", 0, -1)}) >= 2, 15)
        with Client(redis_url) as client:
            ids = [i.id for i in client.enqueue_many([("count", None)] * 50)]
        wait_sync(lambda: db1.hlen("runs") == 50, 15)
    finally:
        assert _stop(sup) == 0
    assert all(db1.hget("runs", i) == b"1" for i in ids)


def _signal(sup: subprocess.Popen[bytes], style: str, children: list[int]) -> None:
    """SIGTERM as each delivery style does it: to the supervisor alone (``kill PID``), to its
    process group (Ctrl-C at a terminal, dumb-init), or to every process (systemd's default
    KillMode=control-group signals each process of the cgroup)."""
    if style == "supervisor":
        sup.send_signal(signal.SIGTERM)
    elif style == "group":
        os.killpg(sup.pid, signal.SIGTERM)
    else:
        for pid in [sup.pid, *children]:
            os.kill(pid, signal.SIGTERM)


def _start_two(redis_url: str, grace: str) -> tuple[subprocess.Popen[bytes], list[str], list[int]]:
    """A supervisor of 2 processes (in a session of its own: a group to signal) running 2 ``block``
    tasks; the ids and the processes' pids."""
    db1 = _db1(redis_url)
    db1.flushdb()
    with Client(redis_url) as client:
        ids = [i.id for i in client.enqueue_many([("block", None)] * 2)]
    sup = start_worker(redis_url, "workers:mux", "--processes", "2", "--shutdown-timeout", grace,
                       "--heartbeat-interval", "0.2", env={"ASYNQPY_TEST_URL": redis_url}, start_new_session=True)
    try:
        wait_sync(lambda: db1.scard("started") == 2, 20)
        insp = Inspector(redis_url)
        wait_sync(lambda: len(insp.servers()) == 2, 20)
        children = [s.pid for s in insp.servers()]
    except BaseException:
        os.killpg(sup.pid, signal.SIGKILL)
        sup.wait()
        raise
    return sup, ids, children


def _stopping(redis_url: str) -> bool:
    """The processes running tasks took the signal (an idle one exits at once)."""
    busy = [s for s in Inspector(redis_url).servers() if s.active]
    return bool(busy) and all(s.status == "stopping" for s in busy)


@pytest.mark.parametrize("style", ["group", "supervisor", "each"])
def test_one_signal_gives_the_grace_period_with_processes(redis_url: str, style: str) -> None:
    """One SIGTERM, however delivered, is one graceful shutdown: the running tasks finish within
    the grace period and are not requeued. (Under a signal to the group, each child used to get
    it twice, from the group and forwarded by the supervisor, and took the second as "requeue
    now".)"""
    db1 = _db1(redis_url)
    sup, ids, children = _start_two(redis_url, "30")
    try:
        _signal(sup, style, children)
        wait_sync(lambda: _stopping(redis_url), 10)  # both took the signal; their tasks still run
        db1.set("release", 1)
        assert sup.wait(20) == 0
    finally:
        if sup.poll() is None:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
    s = Inspector(redis_url).stats("default")
    assert (s.pending, s.active, s.processed, s.failed) == (0, 0, 2, 0)
    assert [db1.hget("runs", i) for i in ids] == [b"1", b"1"]  # finished where they ran: not requeued


@pytest.mark.parametrize("style", ["group", "supervisor"])
def test_a_second_signal_still_requeues_at_once_with_processes(redis_url: str, style: str) -> None:
    """A second signal (Ctrl-C twice) still means "stop now": the supervisor tells its processes
    (SIGUSR2) to put their running tasks back at once, well before the 30 s grace ends."""
    sup, ids, children = _start_two(redis_url, "30")
    try:
        _signal(sup, style, children)
        wait_sync(lambda: _stopping(redis_url), 10)
        _signal(sup, style, children)
        assert sup.wait(20) == 0  # not the 30 s grace: the tasks (blocked 60 s) were put back
    finally:
        if sup.poll() is None:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
    insp = Inspector(redis_url)
    s = insp.stats("default")
    assert (s.pending, s.active, s.processed, s.failed) == (2, 0, 0, 0)
    assert all(insp.task_info("default", i).retried == 0 for i in ids)
