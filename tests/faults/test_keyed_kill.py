"""Scenario: keyed tasks (``key=``: 40 keys, 15 tasks each, some failing once) served by 4 worker
processes SIGKILLed at random. Audit: nothing lost (the common audit, every re-run a lease expiry);
per key, no task started before the previous task of its key had ended for good (its last
recorded end), and the tasks of a key ran in enqueue order; no key is left held, nothing blocked."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
import redis
from audit import Workers, _records, audit, produce, wait_finished
from redisproc import RedisProcess

from asynqpy import Client
from asynqpy.core.spine.keys import queue_keys

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "10", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")


def test_sigkilled_workers_never_run_two_tasks_of_a_key_at_once(
    redis_url: str, recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    rnd = random.Random(19)
    tasks = []
    order: dict[str, list[str]] = defaultdict(list)
    for i in range(600):
        key = f"acct:{i % 40}"
        payload = {"ms": rnd.randint(20, 80), **({"fail": 1} if rnd.random() < 0.1 else {})}
        tasks.append((f"k{i}", payload, {"key": key, "retention": 3600, "retry_delay": 0.1}))
        order[key].append(f"k{i}")
    acked: dict[str, int] = {}
    workers = Workers(redis_url, recorder_server.url, 4, *WORKER_ARGS, log_dir=tmp_path)
    kills = 0
    try:
        with Client(redis_url) as client:
            t = threading.Thread(target=produce, args=(client, tasks, acked))
            t.start()
            end = time.monotonic() + 60
            while (t.is_alive() or kills < 15) and time.monotonic() < end:
                time.sleep(rnd.uniform(0.2, 0.6))
                workers.replace(rnd.randrange(4), rnd.choice(["kill", "kill", "term-kill"]))
                kills += 1
            t.join(60)
        wait_finished(redis_url, len(tasks), timeout=120)
        rep = audit(redis_url, recorder, acked)
    finally:
        workers.stop()
    assert rep.errors == [], rep.errors[:20]
    starts, ends = _records(recorder, "starts"), _records(recorder, "ends")
    bad = []
    for key, ids in order.items():
        for prev, nxt in zip(ids, ids[1:]):
            if nxt in starts and (prev not in ends or min(t for _, t, _ in starts[nxt]) < max(t for _, t, _ in ends[prev])):
                bad.append((key, prev, nxt))
    assert bad == [], bad[:10]
    r = redis.Redis.from_url(redis_url)
    q = queue_keys("default")
    assert r.hlen(q.keyheld) == 0 and r.zcard(q.blocked) == 0
    print(f"\nkeyed SIGKILL scenario: {kills} kills; {rep.line()}; 40 keys: no two tasks of a key at once, "
          "each key in enqueue order")
