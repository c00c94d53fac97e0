"""Scenario: tenants on one queue (issue 32), one of them limited to 2 tasks at once, served by 3
workers SIGKILLed at random while they run the tenants' tasks; then the audit. Nothing is lost,
every re-run is a lease expiry, the limited tenant never has more than 2 runs at once but for
runs of killed workers (their slots come back when their leases expire: the recoverer's retry
goes through the exit path's tenant duty), and once everything finished no tenant state is left:
no active entry, no count, no ring, no pending member."""

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
from asynqpy.core.keys import queue_keys

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "10", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")


def test_sigkilled_workers_lose_no_tenant_task_and_leak_no_tenant_slot(
        redis_url: str, recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path) -> None:
    tasks = []
    for n, (id, payload, options) in enumerate(mixed_tasks(400)):
        tenant = ("capped", "b", "c", "")[n % 4]
        tasks.append((id, {**payload, "ms": 40}, {**options, **({"tenant": tenant} if tenant else {})}))
    capped = {id for id, _, options in tasks if options.get("tenant") == "capped"}
    with Inspector(redis_url) as insp:
        insp.set_tenant("default", "capped", concurrency=2)
    acked: dict[str, int] = {}
    workers = Workers(redis_url, recorder_server.url, 3, *WORKER_ARGS, log_dir=tmp_path)
    kills = 0
    try:
        with Client(redis_url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked))
            producer.start()
            rnd = random.Random(5)
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
    most, killed = most_at_once(starts, ends, capped)
    r = redis.Redis.from_url(redis_url)
    q = queue_keys("default")
    left = {"ta": r.hlen(q.ta), "tq": r.zcard(q.tq), "tr": r.zcard(q.tr),
            "counts": [f for f in r.hkeys(q.tn) if f.startswith(b"a:")], "v": r.hexists(q.tn, "v")}
    print(f"\ntenant SIGKILL scenario: {kills} kills; {rep.line()}; capped tenant at most {most} runs at once "
          f"({killed} killed runs counted to the end); left: {left}")
    assert rep.errors == [], rep.errors[:20]
    assert most <= 2 + killed, (most, killed)
    assert left == {"ta": 0, "tq": 0, "tr": 0, "counts": [], "v": False}, left
