"""Scenario: workers running schedulers (``--scheduler``) SIGKILLed at random while two entries fire
every second (an interval and a 6-field cron); then the audit. Every tick from the first fired to
the last fired is enqueued exactly once (no tick lost while some scheduler was alive or came back
within the grace, none twice however many schedulers raced or died mid-call), and each tick's task
passes the usual audit (it ran, re-runs explained by lease expiries)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import redis
from audit import Workers, audit, wait_finished
from redisproc import RedisProcess

from asynqpy import Inspector
from asynqpy.core.cron.entries import tick_task_id
from asynqpy.core.spine.keys import queue_keys

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--scheduler", "--concurrency", "10", "--lease", "1.5", "--heartbeat-interval", "0.3",
               "--shutdown-timeout", "0.5")
ENTRIES = {"every-second": {"every": 1}, "cron-second": {"cron": "* * * * * *"}}


def _ticks(r: redis.Redis) -> int:
    """The fewest ticks enqueued so far of any entry."""
    ids = [k.decode() for k in r.hkeys(queue_keys("default").tasks)]
    return min(sum(1 for i in ids if i.startswith(f"cron:{name}:")) for name in ENTRIES)


@pytest.mark.slow(cost=2)  # (its lane's weight: tests/conftest.py _lane_cost)
def test_sigkilled_schedulers_enqueue_each_tick_once(redis_url: str, recorder: redis.Redis,
                                                     recorder_server: RedisProcess, tmp_path: Path) -> None:
    with Inspector(redis_url) as insp:
        for name, spec in ENTRIES.items():
            insp.cron_add(name, "job", {"ms": 50}, retention=3600, retry_delay=0.1, **spec)  # type: ignore[arg-type]
    workers = Workers(redis_url, recorder_server.url, 3, *WORKER_ARGS, log_dir=tmp_path)
    kills = 0
    try:
        rnd = random.Random(5)
        r = redis.Redis.from_url(redis_url)
        start = time.monotonic()
        # at least 20 s of kills, and on until each entry has 15 ticks (a loaded machine restarts
        # the schedulers slowly: a fixed 20 s gave 12), at most 90 s
        while time.monotonic() < start + 20 or (_ticks(r) < 15 and time.monotonic() < start + 90):
            time.sleep(rnd.uniform(0.2, 1.0))
            workers.replace(rnd.randrange(3), rnd.choice(["kill", "kill", "term-kill"]))
            kills += 1
        with Inspector(redis_url) as insp:
            for name in ENTRIES:
                insp.cron_pause(name)
        time.sleep(0.5)  # a call in flight lands
        ids = [k.decode() for k in r.hkeys(queue_keys("default").tasks)]
        wait_finished(redis_url, len(ids), timeout=60)
    finally:
        workers.stop()
    acked: dict[str, int] = {}
    for name in ENTRIES:
        ticks = sorted(int(i.rsplit(":", 1)[1]) for i in ids if i.startswith(f"cron:{name}:"))
        assert len(ticks) >= 15, (name, len(ticks))
        expected = list(range(ticks[0], ticks[-1] + 1, 1000))
        assert ticks == expected, f"{name}: ticks missing {sorted(set(expected) - set(ticks))[:10]}"
        acked.update({tick_task_id(name, t): 0 for t in ticks})
    rep = audit(redis_url, recorder, acked)
    print(f"\nscheduler SIGKILL scenario: {kills} kills; {len(acked)} ticks; {rep.line()}")
    assert len(ids) == len(acked)  # nothing but the ticks' tasks, each once (ids are unique per tick)
    assert rep.errors == [], rep.errors[:20]
