"""Scenario 3: connections cut under the workers (CLIENT KILL), Redis paused (CLIENT PAUSE)
longer than the lease, and a worker frozen (SIGSTOP) longer than the lease while another takes
its tasks over: leases expire, tasks re-run (once), the stalled worker's late write is refused
and logged, and the audit holds."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from audit import Report, Workers, audit, mixed_tasks, produce, storm, wait_finished
from redisproc import RedisProcess

from asynqpy import Client

pytestmark = [pytest.mark.real, pytest.mark.slow]

ARGS = ("--concurrency", "20", "--lease", "1", "--heartbeat-interval", "0.25", "--shutdown-timeout", "0.5")


def _scenario(url: str, recorder: redis.Redis, recorder_url: str, tmp: Path, n: int, prefix: str,
              act: Callable[[redis.Redis], None]) -> Report:
    """Two workers, a producer of ``n`` mixed tasks, ``act`` done to Redis mid-load; then wait
    until every task finished and audit."""
    n, pause = storm(n, 0.002)
    tasks = mixed_tasks(n, prefix=prefix)
    acked: dict[str, int] = {}
    workers = Workers(url, recorder_url, 2, *ARGS, log_dir=tmp)
    try:
        with Client(url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked), kwargs={"pause": pause})
            producer.start()
            time.sleep(0.5)
            act(redis.Redis.from_url(url))
            producer.join(90)
            assert not producer.is_alive()
        assert len(acked) == n
        wait_finished(url, n, timeout=60)
        return audit(url, recorder, acked)
    finally:
        workers.stop()


def test_connections_killed_under_the_workers(redis_url: str, recorder: redis.Redis,
                                              recorder_server: RedisProcess, tmp_path: Path) -> None:
    def kill_connections(admin: redis.Redis) -> None:
        for _ in range(10):
            admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            time.sleep(0.25)

    rep = _scenario(redis_url, recorder, recorder_server.url, tmp_path, 1500, "k", kill_connections)
    print(f"\nCLIENT KILL x10: {rep.line()}")
    assert rep.errors == [], rep.errors[:20]


def test_redis_paused_longer_than_the_lease(redis_url: str, recorder: redis.Redis,
                                            recorder_server: RedisProcess, tmp_path: Path) -> None:
    def pause(admin: redis.Redis) -> None:
        admin.execute_command("CLIENT", "PAUSE", "2500", "ALL")  # 2.5 s, the lease is 1 s

    rep = _scenario(redis_url, recorder, recorder_server.url, tmp_path, 1500, "p", pause)
    print(f"\nCLIENT PAUSE 2.5 s (lease 1 s): {rep.line()}")
    assert rep.errors == [], rep.errors[:20]


def test_frozen_worker_loses_its_tasks_and_its_late_writes_are_refused(
    redis_url: str, recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    acked: dict[str, int] = {}
    frozen = Workers(redis_url, recorder_server.url, 1, *ARGS, log_dir=tmp_path, fork_first=False)
    other = None
    try:
        with Client(redis_url) as client:  # 20 tasks of 600 ms: the frozen worker takes them all
            for i in range(20):
                client.enqueue("job", {"ms": 600}, task_id=f"f{i}", retention=3600, retry_delay=0)
                acked[f"f{i}"] = 0
        deadline = time.monotonic() + 10
        while recorder.llen("starts") < 20:
            assert time.monotonic() < deadline, "the first worker did not start the tasks"
            time.sleep(0.01)
        frozen.procs[0].send_signal(signal.SIGSTOP)  # frozen mid-task, for longer than the lease
        other = Workers(redis_url, recorder_server.url, 1, *ARGS, log_dir=tmp_path / "other", fork_first=False)
        wait_finished(redis_url, 20, timeout=30)  # the other worker recovered and ran them
        frozen.procs[0].send_signal(signal.SIGCONT)

        def said() -> list[str]:  # why the thawed worker stopped caring about each task
            return [ln for ln in frozen.logs().splitlines() if "lost the lease" in ln or "refused" in ln]

        deadline = time.monotonic() + 15
        while len(said()) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        rep = audit(redis_url, recorder, acked)
        log = frozen.logs()
    finally:
        frozen.procs[0].send_signal(signal.SIGCONT)
        frozen.stop()
        if other:
            other.stop()
    print(f"\nSIGSTOP beyond the lease: {rep.line()}")
    assert rep.errors == [], rep.errors[:20]
    assert rep.states["c"] == 20 and rep.lease_reruns == 20
    ends = [x.decode().split("|") for x in recorder.lrange("ends", 0, -1)]
    assert sorted(e[0] for e in ends if e[1] == "1") == sorted(acked)  # each re-run finished once
    # the frozen worker said why it stopped caring about each task (lease lost or late write refused)
    said = [ln for ln in log.splitlines() if "lost the lease" in ln or "refused" in ln]
    assert len(said) >= 20, log[-3000:]
