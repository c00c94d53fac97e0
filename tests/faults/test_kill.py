"""Scenario 1: worker processes killed with SIGKILL at random moments, again and again, while
tasks run, retry, get archived, and while workers shut down; then the audit."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
import redis
from audit import Workers, audit, mixed_tasks, produce, wait_finished
from redisproc import RedisProcess

from asynqpy import Client

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "20", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")


def test_random_sigkills_lose_nothing_and_every_rerun_is_a_lease_expiry(
    redis_url: str, recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    tasks = mixed_tasks(3000)
    acked: dict[str, int] = {}
    workers = Workers(redis_url, recorder_server.url, 3, *WORKER_ARGS, log_dir=tmp_path)
    kills = 0
    try:
        with Client(redis_url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked), kwargs={"pause": 0.001})
            producer.start()
            rnd = random.Random(11)
            end = time.monotonic() + 60
            while (producer.is_alive() or kills < 12) and time.monotonic() < end:
                time.sleep(rnd.uniform(0.2, 0.6))
                workers.replace(rnd.randrange(3), rnd.choice(["kill", "kill", "term-kill"]))
                kills += 1
            producer.join(60)
        wait_finished(redis_url, len(tasks), timeout=60)
        rep = audit(redis_url, recorder, acked)
    finally:
        workers.stop()
    print(f"\nSIGKILL scenario: {kills} kills; {rep.line()}")
    assert len(acked) == len(tasks)
    assert rep.errors == [], rep.errors[:20]
    assert rep.states["c"] + rep.states["x"] == len(tasks)
