"""Scenario: a rolling restart done with remote control (docs/deploy.md): two workers serve a
stream of tasks; each in turn is made quiet (it finishes what it runs and takes nothing new), then
stopped through Redis (it exits by itself, code 0), and a new one takes its place, while the other
keeps working. Audit: the common audit (nothing lost, every task completed or archived as planned,
no re-run but those planned), and no quiet worker started a task after its acknowledgement."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from audit import Workers, _records, audit, mixed_tasks, produce, storm, wait_finished
from redisproc import RedisProcess

from asynqpy import Client, Inspector

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "10", "--lease", "5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "10")


def test_a_rolling_restart_by_quiet_then_stop_loses_nothing(
    redis_url: str, recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    n, pause = storm(1500, 0.002)
    tasks = mixed_tasks(n, prefix="deploy-")
    acked: dict[str, int] = {}
    workers = Workers(redis_url, recorder_server.url, 2, *WORKER_ARGS, log_dir=tmp_path)
    try:
        with Client(redis_url) as client, Inspector(redis_url) as insp:
            producer = threading.Thread(target=produce, args=(client, tasks, acked), kwargs={"pause": pause})
            producer.start()
            quiet: list[tuple[int, float]] = []  # (pid, when it acknowledged quiet)
            for n in range(2):  # each worker in turn, the other serving meanwhile
                pid = workers.procs[n].pid
                deadline = time.monotonic() + 20
                # it ran a task (recorded), and its heartbeat is written: not "it runs one now", which
                # never held for the second worker once the producer had ended and the first drained all
                while not (any(p == pid for runs in _records(recorder, "starts").values() for _, _, p in runs)
                           and [s for s in insp.servers() if s.pid == pid]):
                    assert time.monotonic() < deadline, f"worker {n} never ran a task"
                    time.sleep(0.05)
                [sid] = [s.id for s in insp.servers() if s.pid == pid]
                assert insp.quiet_server(sid) == "quiet"
                quiet.append((pid, time.time()))
                time.sleep(1.0)  # the other worker takes everything meanwhile
                assert insp.stop_server(sid) == "stopping"
                assert workers.procs[n].wait(30) == 0  # it exits by itself, gracefully
                workers.procs[n] = workers._start(n)  # the new version
            producer.join(90)
        wait_finished(redis_url, len(tasks), timeout=90)
        rep = audit(redis_url, recorder, acked)
    finally:
        workers.stop()
    assert rep.errors == [], rep.errors[:20]
    late = [(id, t) for id, runs in _records(recorder, "starts").items() for _, t, p in runs
            for pid, quiet_at in quiet if p == pid and t > quiet_at]
    assert late == [], late[:5]
    print(f"\nrolling restart (each worker quiet, then stopped, then a new one): {rep.line()}")
