"""Scenario: a queue limited to 3 tasks at once, served by 3 workers SIGKILLed at random while
they hold its slots; then the audit. The slots of killed workers come back when their leases
expire (nothing leaks: every task finishes), no more than 3 runs ever overlap, and every re-run
is a lease expiry."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
import redis
from audit import Workers, _records, audit, mixed_tasks, most_at_once, produce, wait_finished
from redisproc import RedisProcess

from asynqpy import Client, Inspector

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "10", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")


def test_sigkilled_workers_give_their_slots_back(redis_url: str, recorder: redis.Redis,
                                                  recorder_server: RedisProcess, tmp_path: Path) -> None:
    tasks = [(id, {"ms": 80}, {"retention": 3600, "retry_delay": 0.1}) for id, _, _ in mixed_tasks(300)]
    with Inspector(redis_url) as insp:
        insp.set_limits("default", concurrency=3)
    acked: dict[str, int] = {}
    workers = Workers(redis_url, recorder_server.url, 3, *WORKER_ARGS, log_dir=tmp_path)
    kills = 0
    try:
        with Client(redis_url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked))
            producer.start()
            rnd = random.Random(9)
            end = time.monotonic() + 8
            while time.monotonic() < end:
                time.sleep(rnd.uniform(0.3, 0.8))
                workers.replace(rnd.randrange(3), rnd.choice(["kill", "kill", "term-kill"]))
                kills += 1
            producer.join(60)
        wait_finished(redis_url, len(tasks), timeout=90)
        rep = audit(redis_url, recorder, acked)
    finally:
        workers.stop()
    starts, ends = _records(recorder, "starts"), _records(recorder, "ends")
    most, _ = most_at_once(starts, ends)  # (killed runs never end: counted as running to the end)
    ended = sum(len(r) for r in ends.values())
    print(f"\nconcurrency-limit SIGKILL scenario: {kills} kills; {rep.line()}; at most {most} runs at once "
          f"(killed runs counted to the end)")
    assert rep.errors == [], rep.errors[:20]
    assert ended >= len(tasks)
    assert most <= 3 + (rep.starts - ended), (most, rep.starts, ended)
