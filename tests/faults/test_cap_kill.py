"""Scenarios: bounded queues (issue 43 item 5; docs/queues.md "Bounded queues") under faults.

1. An enqueue storm at a ``drop_oldest`` cap by a producer process that is SIGKILLed mid-storm,
   while redis-server (append-only file, fsync always) is crashed and restarted under it: every
   task the producer saw acknowledged is stored, pending or archived; every archived one was
   dropped by the cap, with its 'archived' event saying why; the queue holds no more than its cap;
   the counter of drops is the number of tasks archived; nothing was refused.
2. A ``reject`` cap as backpressure: a producer that waits and sends again on QueueFullError,
   workers SIGKILLed and Redis crashed and restarted under it: every acknowledged task ran (the
   fault suite's audit), and the cap did refuse (the producer was held back)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from audit import Workers, audit, mixed_tasks, wait_finished
from redisproc import RedisProcess

from asynqpy import Client, Inspector, QueueFullError, TaskIdConflictError
from asynqpy.core.spine.keys import queue_keys

pytestmark = [pytest.mark.real, pytest.mark.slow]

CAP = 30
STORM = """
import sys, time
import redis
from asynqpy import Client
url, out = sys.argv[1], open(sys.argv[2], "a", buffering=1)
client = Client(url)
n = 0
while n < 3000:
    batch = [f"d-{n + i}" for i in range(1 if n % 30 < 10 else 10)]
    while True:
        try:
            if len(batch) == 1:
                client.enqueue("job", {"n": n}, queue="capped", task_id=batch[0])
            else:
                client.enqueue_many([("job", {"n": n + i}, {"task_id": id}) for i, id in enumerate(batch)],
                                    queue="capped")
            break
        except (redis.RedisError, OSError):
            time.sleep(0.02)  # sent again, the same ids: a call stored before the error is its own
    out.write(" ".join(batch) + "\\n")
    n += len(batch)
"""


def _acked(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _wait_acked(path: Path, n: int, producer: subprocess.Popen[bytes], limit: float = 60.0) -> None:
    """Wait until the producer has acknowledged ``n`` ids (bounded; it must still be running)."""
    deadline = time.monotonic() + limit
    while len(_acked(path)) < n:
        if producer.poll() is not None:  # (the storm is over: every id sent; anything else is a failure)
            assert producer.returncode == 0, producer.stderr.read().decode()[-2000:] if producer.stderr else ""
            return
        assert time.monotonic() < deadline, f"the producer acknowledged {len(_acked(path))} of {n} in {limit} s"
        time.sleep(0.05)


def test_a_drop_oldest_storm_with_the_producer_and_redis_killed_loses_nothing_accepted(tmp_path: Path) -> None:
    server = RedisProcess("--appendonly", "yes", "--appendfsync", "always")
    acked_file = tmp_path / "acked.txt"
    try:
        with Inspector(server.url) as insp:
            insp.set_queue_cap("capped", CAP, "drop_oldest")
        producer = subprocess.Popen([sys.executable, "-c", STORM, server.url, str(acked_file)],
                                    env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _wait_acked(acked_file, 2 * CAP, producer)  # (not a fixed sleep: a loaded machine starts it late)
        server.crash()
        time.sleep(0.3)
        server = server.restart()
        _wait_acked(acked_file, len(_acked(acked_file)) + CAP, producer)  # the storm goes on after the restart
        producer.send_signal(signal.SIGKILL)
        producer.wait(10)
        acked = _acked(acked_file)
        r = redis.Redis.from_url(server.url)
        q = queue_keys("capped")
        stored = {k.decode(): v for k, v in r.hgetall(q.tasks).items()}
        reasons = {f[b"id"].decode(): f.get(b"error") for _, f in r.xrange(q.events)
                   if f.get(b"e") == b"archived" and b"id" in f}
        conf = r.hmget(q.conf, "cap_dropped", "cap_rejected")
        pending = r.llen(q.pending) + r.zcard(q.prio) + r.zcard(q.tq)
    finally:
        server.stop()
    archived = {id for id, v in stored.items() if v[:1] == b"x"}
    print(f"\ncap storm: {len(acked)} acknowledged, {len(stored)} stored, {len(archived)} dropped, "
          f"{pending} pending")
    assert len(acked) >= 3 * CAP  # the storm went well past the cap, across the restart (_wait_acked: 2 caps, then one more)
    assert [id for id in acked if id not in stored] == []  # nothing acknowledged is lost
    assert {v[:1] for v in stored.values()} <= {b"p", b"x"}
    assert pending <= CAP and pending == len(stored) - len(archived)
    assert {id: reasons.get(id) for id in archived} == dict.fromkeys(archived, b"dropped: queue full")
    assert (int(conf[0] or 0), int(conf[1] or 0)) == (len(archived), 0)


WORKER_ARGS = ("--concurrency", "5", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")


def _produce_with_backpressure(client: Client, tasks: list[tuple[str, dict[str, Any], dict[str, Any]]],
                               acked: dict[str, int], refused: list[int]) -> None:
    """Each task sent until acknowledged: a refusal of the cap waits a little and sends it again
    (backpressure), as does a Redis error (a task stored before it is then the call's own)."""
    for id, payload, options in tasks:
        while True:
            try:
                client.enqueue("job", payload, task_id=id, **options)
                break
            except TaskIdConflictError:
                break
            except QueueFullError:
                refused[0] += 1
                time.sleep(0.02)
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        acked[id] = payload.get("fail", 0)


def test_a_reject_cap_holds_producers_back_and_loses_nothing_under_kills(
        recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path) -> None:
    server = RedisProcess("--appendonly", "yes", "--appendfsync", "always")
    tasks = [(id, {**payload, "ms": 20}, options) for id, payload, options in mixed_tasks(300, prefix="cap-")]
    acked: dict[str, int] = {}
    refused = [0]
    workers = Workers(server.url, recorder_server.url, 2, *WORKER_ARGS, log_dir=tmp_path)
    try:
        with Inspector(server.url) as insp:
            insp.set_queue_cap("default", 10)
        with Client(server.url) as client:
            producer = threading.Thread(target=_produce_with_backpressure, args=(client, tasks, acked, refused))
            producer.start()
            rnd = random.Random(11)
            time.sleep(1.0)
            workers.replace(rnd.randrange(2), "kill")
            server.crash()
            time.sleep(0.3)
            server = server.restart()
            time.sleep(0.8)
            workers.replace(rnd.randrange(2), "kill")
            producer.join(120)
            assert not producer.is_alive()
        wait_finished(server.url, len(tasks), timeout=120)
        rep = audit(server.url, recorder, acked)
        with Inspector(server.url) as insp:
            info = insp.queue_info("default")
    finally:
        workers.stop()
        server.stop()
    print(f"\ncap backpressure: {rep.line()}; {refused[0]} refusals (counted {info.rejected}), "
          f"{info.dropped} dropped")
    assert len(acked) == len(tasks)
    assert rep.errors == [], rep.errors[:20]
    assert refused[0] > 0 and info.dropped == 0 and info.max_pending == 10
