"""Scenario 1: worker processes killed with SIGKILL at random moments, again and again, while
tasks run, retry, get archived, and while workers shut down; then the audit."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
import redis
from audit import Workers, audit, mixed_tasks, produce, storm, wait_finished
from redisproc import RedisProcess

from asynqpy import Client
from asynqpy.core.spine.keys import queue_keys

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "20", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")
CALLS = 20
"""Calls each of the three callers makes through the storm. The storm lasts as long as they (at
least 12 kills), a kill every 0.2 to 0.6 s of a worker that serves: each kill starts an interpreter
(~0.6 s of CPU); with 30 calls, 3 000 tasks and kills of workers still importing too (80 kills on
a loaded machine, 28 of them of an interpreter not yet running) the storm cost 19 to 47 s of CPU,
the suite's most (issue 43's budget)."""


def _caller(url: str, n: int, prefix: str, results: dict[str, list[str]]) -> None:
    """Client.call ``n`` tasks one after the other, each waiting for its result through the storm
    (retention 0: the result lives only in the caller's inbox)."""
    with Client(url) as client:
        for i in range(n):
            id = f"{prefix}{i}"
            results.setdefault(id, []).append(client.call("job", {"ms": 150}, task_id=id, timeout=150, retry_delay=0.1))


def test_random_sigkills_lose_nothing_and_every_rerun_is_a_lease_expiry(
    redis_url: str, recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    n, pause = storm(2000, 0.001)
    tasks = mixed_tasks(n)
    acked: dict[str, int] = {}
    called: dict[str, list[str]] = {}
    workers = Workers(redis_url, recorder_server.url, 3, *WORKER_ARGS, log_dir=tmp_path)
    kills = 0
    try:
        with Client(redis_url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked), kwargs={"pause": pause})
            producer.start()
            callers = [threading.Thread(target=_caller, args=(redis_url, CALLS, f"call{k}-", called)) for k in range(3)]
            for c in callers:
                c.start()
            rnd = random.Random(11)
            end = time.monotonic() + 60
            while (producer.is_alive() or kills < 12 or any(c.is_alive() for c in callers)) and \
                    time.monotonic() < end:
                time.sleep(rnd.uniform(0.2, 0.6))
                workers.replace(rnd.randrange(3), rnd.choice(["kill", "kill", "term-kill"]))
                kills += 1
            producer.join(60)
            for c in callers:
                c.join(200)
        wait_finished(redis_url, len(tasks), timeout=60)
        rep = audit(redis_url, recorder, acked)
    finally:
        workers.stop()
    print(f"\nSIGKILL scenario: {kills} kills; {rep.line()}")
    assert len(acked) == len(tasks)
    assert rep.errors == [], rep.errors[:20]
    assert rep.states["c"] + rep.states["x"] == len(tasks)
    # every caller got its task's result, once, from the run that finished (a re-run of a killed
    # worker's task answers with its own attempt number)
    assert sorted(called) == sorted(f"call{k}-{i}" for k in range(3) for i in range(CALLS))
    reruns = 0
    for id, got in called.items():
        assert len(got) == 1 and got[0].split("|")[0] == id, (id, got)
        reruns += got[0] != f"{id}|0"
    print(f"callers: {len(called)} calls answered, {reruns} by a re-run after a kill")
    assert not redis.Redis.from_url(redis_url).exists(queue_keys("default").watch)
