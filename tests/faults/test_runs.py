"""Scenario: tasks that must succeed on 3 distinct workers (``runs=3``), served by 4 named worker
processes SIGKILLed at random while they hold runs. A killed worker's run expires and a worker
takes its place (another, or the same name again: a replacement process); a worker never starts a
task twice but after its run there expired; every task completes with exactly 3 runs recorded as
succeeded, on 3 distinct workers; nothing is left behind."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import redis
from audit import Workers, _records, produce, wait_finished
from redisproc import RedisProcess

from asynqpy import Client, Inspector
from asynqpy.core.spine.keys import queue_keys

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "5", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")
NAMES = ["w0", "w1", "w2", "w3"]


def test_sigkilled_workers_runs_are_replaced_never_repeated(redis_url: str, recorder: redis.Redis,
                                                            recorder_server: RedisProcess, tmp_path: Path) -> None:
    tasks = [(f"r{i}", {"ms": 120}, {"runs": 3, "retention": 3600}) for i in range(60)]
    acked: dict[str, int] = {}
    workers = Workers(redis_url, recorder_server.url, 4, *WORKER_ARGS, log_dir=tmp_path, names=NAMES)
    kills = 0
    try:
        with Client(redis_url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked))
            producer.start()
            rnd = random.Random(5)
            end = time.monotonic() + 8
            while time.monotonic() < end:
                time.sleep(rnd.uniform(0.3, 0.8))
                workers.replace(rnd.randrange(4), rnd.choice(["kill", "kill", "term-kill"]))
                kills += 1
            producer.join(60)
        wait_finished(redis_url, len(tasks), timeout=90)
    finally:
        workers.stop()
    r = redis.Redis.from_url(redis_url)
    q = queue_keys("default")
    states = Counter(v[:1] for v in r.hmget(q.tasks, list(acked)))
    assert states == Counter({b"c": len(tasks)}), states
    starts = _records(recorder, "starts")  # run id '<task>|<worker>' -> its starts
    per_task: dict[str, Counter[str]] = defaultdict(Counter)
    for run_id, runs in starts.items():
        task, _, name = run_id.rpartition("|")
        per_task[task][name] += len(runs)
    with Inspector(redis_url) as insp:
        events = [e for e in insp.events("default") if e.event == "run"]
    expired_on: Counter[tuple[str, str]] = Counter((e.task_id, e.worker) for e in events if e.outcome == "lease expired")
    repeated = {(t, n): k for t, c in per_task.items() for n, k in c.items() if k > 1 + expired_on[(t, n)]}
    assert repeated == {}, list(repeated.items())[:5]  # never twice on a worker, but after an expired run
    succeeded: dict[str, list[str]] = defaultdict(list)
    for e in events:
        if e.outcome == "succeeded":
            succeeded[e.task_id].append(e.worker)
    bad = {t: w for t, w in succeeded.items() if len(w) != 3 or len(set(w)) != 3}
    assert sorted(succeeded) == sorted(acked) and bad == {}, list(bad.items())[:5]
    expired = sum(1 for e in events if e.outcome == "lease expired")
    given_back = sum(1 for e in events if e.outcome == "given back")
    assert not r.exists(q.targeted) and not r.exists(q.runs) and r.zcard(q.lease) == 0
    print(f"\nruns SIGKILL scenario: {kills} kills; {len(tasks)} tasks x 3 runs completed; {expired} runs expired "
          f"and were replaced, {given_back} given back at shutdown; no worker ran a task twice but after an "
          "expired run")
