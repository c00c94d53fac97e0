"""Scenario: tenants on one queue (issue 32), one of them limited to 2 tasks at once, served by 3
workers SIGKILLed at random while they run the tenants' tasks; then the audit. Nothing is lost,
every re-run is a lease expiry, the limited tenant never has more than 2 runs at once but for
runs of killed workers (their slots come back when their leases expire: the recoverer's retry
goes through the exit path's tenant duty), and once everything finished no tenant state is left:
no active entry, no count, no ring, no pending member. The second scenario crashes and restarts
redis-server (an append-only file) under the same load."""

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
from asynqpy.core.spine.keys import queue_keys

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


def test_a_redis_restart_under_tenant_load_loses_nothing_and_leaks_no_tenant_slot(
        recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path) -> None:
    """The same tenants and limit on a redis-server with an append-only file (fsync always),
    crashed (SIGKILL) and restarted under load, one worker SIGKILLed too: nothing acknowledged is
    lost, re-runs are lease expiries, the capped tenant stays at its limit but for killed runs,
    and no tenant state is left once everything finished (its slots, ring and counts came back
    from the file as they were, and the exits freed them)."""
    server = RedisProcess("--appendonly", "yes", "--appendfsync", "always")
    tasks = []
    for n, (id, payload, options) in enumerate(mixed_tasks(300, prefix="rs-")):
        tenant = ("capped", "b", "c", "")[n % 4]
        tasks.append((id, {**payload, "ms": 30}, {**options, **({"tenant": tenant} if tenant else {})}))
    capped = {id for id, _, options in tasks if options.get("tenant") == "capped"}
    acked: dict[str, int] = {}
    workers = Workers(server.url, recorder_server.url, 2, *WORKER_ARGS, log_dir=tmp_path)
    try:
        with Inspector(server.url) as insp:
            insp.set_tenant("default", "capped", concurrency=2)
        with Client(server.url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked), kwargs={"pause": 0.002})
            producer.start()
            time.sleep(1.0)
            server.crash()
            time.sleep(0.5)  # down for half a second
            server = server.restart()
            time.sleep(0.7)
            workers.replace(0, "kill")
            producer.join(90)
            assert not producer.is_alive()
        wait_finished(server.url, len(tasks), timeout=90)
        rep = audit(server.url, recorder, acked)
        starts, ends = _records(recorder, "starts"), _records(recorder, "ends")
        most, killed = most_at_once(starts, ends, capped)
        r = redis.Redis.from_url(server.url)
        q = queue_keys("default")
        left = {"ta": r.hlen(q.ta), "tq": r.zcard(q.tq), "tr": r.zcard(q.tr),
                "counts": [f for f in r.hkeys(q.tn) if f.startswith(b"a:")], "v": r.hexists(q.tn, "v")}
    finally:
        workers.stop()
        server.stop()
    print(f"\ntenant restart scenario: {rep.line()}; capped tenant at most {most} runs at once; left: {left}")
    assert len(acked) == len(tasks)
    assert rep.errors == [], rep.errors[:20]
    assert most <= 2 + killed, (most, killed)
    assert left == {"ta": 0, "tq": 0, "tr": 0, "counts": [], "v": False}, left
