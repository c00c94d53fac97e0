"""Scenario: workers that aggregate groups SIGKILLed at random while producers fill 31 groups;
then the audit. Every grouped task ends in exactly one aggregate (none lost, none in two), no
group is left behind, and each aggregate passes the usual audit (it ran; re-runs explained)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from audit import Workers, audit, produce, storm
from redisproc import RedisProcess

from asynqpy import Client, Inspector
from asynqpy.core.model.codec import decode
from asynqpy.core.spine.keys import queue_keys

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "10", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")


def test_sigkilled_aggregators_put_each_task_in_one_aggregate(redis_url: str, recorder: redis.Redis,
                                                             recorder_server: RedisProcess, tmp_path: Path) -> None:
    n, pause = storm(1500, 0.002)
    tasks = [(f"m{i}", {"n": i}, {"group": f"g{i % 31}", "max_retry": 0}) for i in range(n)]
    acked: dict[str, int] = {}
    workers = Workers(redis_url, recorder_server.url, 3, *WORKER_ARGS, log_dir=tmp_path,
                      target="fault_workers:grouping")
    kills = 0
    try:
        with Client(redis_url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked), kwargs={"pause": pause})
            producer.start()
            rnd = random.Random(3)
            while producer.is_alive() or kills < 10:
                time.sleep(rnd.uniform(0.2, 0.6))
                workers.replace(rnd.randrange(3), rnd.choice(["kill", "kill", "term-kill"]))
                kills += 1
            producer.join(60)
        r = redis.Redis.from_url(redis_url)
        q = queue_keys("default")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every group aggregated and every aggregate finished
            with Inspector(redis_url) as insp:
                info = insp.queue_info("default")
            if info.aggregating == 0 and info.pending == info.active == info.retry == 0:
                break
            time.sleep(0.2)
    finally:
        workers.stop()
    assert info.aggregating == 0 and info.groups == 0, info
    members: Counter[str] = Counter()
    aggregates: dict[str, int] = {}
    for id, value in r.hgetall(q.tasks).items():
        msg = decode(value[1:])
        assert value[:1] in b"cx", (id, value[:1])
        members.update(msg.payload["members"])
        aggregates[id.decode()] = 0
    assert set(members) == set(acked), sorted(set(acked) - set(members))[:10]  # none lost
    assert max(members.values()) == 1, [m for m, n in members.items() if n > 1][:10]  # none twice
    rep = audit(redis_url, recorder, aggregates)
    print(f"\ngroups SIGKILL scenario: {kills} kills; {len(acked)} grouped tasks in {len(aggregates)} aggregates; "
          f"{rep.line()}")
    assert rep.errors == [], rep.errors[:20]
