"""Scenario: durable processes (20 ledgers, 15 call inputs each, and a timer that ticks 3 times)
served by 4 worker processes SIGKILLed at random, and the same with redis-server restarted twice
(append-only file). Audit: the common audit for the call inputs (nothing lost, every re-run a
lease expiry); per process, its history holds every input's event exactly once (no duplicate, no
gap: a killed input wrote nothing and ran again from the state before it), the calls in enqueue
order, exactly 3 ticks; event ids 1..n; the state agrees with the history; no key is left held."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from audit import Workers, audit
from redisproc import RedisProcess

from asynqpy import Client, Inspector
from asynqpy.core.model.errors import TaskIdConflictError
from asynqpy.core.processes.model import input_payload, key_of
from asynqpy.core.spine.keys import queue_keys

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "10", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5")
PROCS, CALLS, TICKS = 20, 15, 3


def _retrying(fn: Any, patience: float = 30.0) -> Any:
    deadline = time.monotonic() + patience
    while True:
        try:
            return fn()
        except (redis.RedisError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _produce(client: Client, rnd: random.Random, acked: dict[str, int]) -> None:
    for pid in range(PROCS):
        _retrying(lambda: client.start_process("ledger", f"L{pid}"))
    for j in range(CALLS):
        for pid in range(PROCS):
            id = f"L{pid}-c{j}"

            def send() -> None:
                try:
                    client.enqueue("process:ledger", input_payload(f"L{pid}", "call", {"n": j, "ms": rnd.randint(10, 60)}),
                                   key=key_of(f"L{pid}"), task_id=id, retention=3600, retry_delay=0.1)
                except TaskIdConflictError:
                    pass  # an earlier attempt was stored

            _retrying(send)
            acked[id] = 0
        time.sleep(0.02)


def _done(url: str) -> bool:
    try:
        with Inspector(url) as insp:
            total, procs = insp.processes("default", 0, PROCS)
            return total == PROCS and all((p.state or {}).get("count") == CALLS and p.state.get("ticks") == TICKS
                                          for p in procs)
    except redis.RedisError:
        return False


def _audit_processes(url: str) -> list[str]:
    errors = []
    events = 0
    with Inspector(url) as insp:
        for pid in range(PROCS):
            p = insp.process("default", f"L{pid}", first=1, count=1000)
            data = [e.data for e in p.history]
            events += len(data)
            if [e.id for e in p.history] != list(range(1, p.events + 1)):
                errors.append(f"L{pid}: event ids {[e.id for e in p.history]}")
            calls = [d for d in data if isinstance(d, int)]
            if calls != list(range(CALLS)):
                errors.append(f"L{pid}: calls in history {calls}")
            if data.count("tick") != TICKS or data[0] != "init" or data.count("init") != 1:
                errors.append(f"L{pid}: history {data}")
            if p.state != {"count": CALLS, "sum": sum(range(CALLS)), "ticks": TICKS} or p.status != "running":
                errors.append(f"L{pid}: {p.status} state {p.state}")
            if p.timer is not None:
                errors.append(f"L{pid}: a timer left {p.timer}")
    r = redis.Redis.from_url(url)
    q = queue_keys("default")
    if r.hlen(q.hist) != events:
        errors.append(f"{r.hlen(q.hist)} history entries stored, {events} in the histories")
    if r.hlen(q.keyheld) or r.zcard(q.blocked) or r.zcard(q.scheduled):
        errors.append(f"left: {r.hlen(q.keyheld)} keys held, {r.zcard(q.blocked)} blocked, "
                      f"{r.zcard(q.scheduled)} scheduled")
    return errors


def _wait(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _done(url):
        assert time.monotonic() < deadline, "the processes did not finish in time"
        time.sleep(0.2)


def test_sigkilled_workers_never_duplicate_or_lose_a_process_event(
    redis_url: str, recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    rnd = random.Random(20)
    acked: dict[str, int] = {}
    workers = Workers(redis_url, recorder_server.url, 4, *WORKER_ARGS, log_dir=tmp_path)
    kills = 0
    try:
        with Client(redis_url) as client:
            t = threading.Thread(target=_produce, args=(client, random.Random(1), acked))
            t.start()
            end = time.monotonic() + 60
            while (t.is_alive() or kills < 15) and time.monotonic() < end:
                time.sleep(rnd.uniform(0.2, 0.6))
                workers.replace(rnd.randrange(4), rnd.choice(["kill", "kill", "term-kill"]))
                kills += 1
            t.join(60)
        _wait(redis_url, 120)
        rep = audit(redis_url, recorder, acked)
    finally:
        workers.stop()
    assert rep.errors == [], rep.errors[:20]
    errors = _audit_processes(redis_url)
    assert errors == [], errors[:20]
    print(f"\nprocess SIGKILL scenario: {kills} kills; {rep.line()}; {PROCS} processes: every event once, in order")


def test_redis_restarts_never_duplicate_or_lose_a_process_event(
    recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    server = RedisProcess("--appendonly", "yes", "--appendfsync", "everysec")
    acked: dict[str, int] = {}
    workers = Workers(server.url, recorder_server.url, 2, *WORKER_ARGS, log_dir=tmp_path)
    try:
        with Client(server.url) as client:
            t = threading.Thread(target=_produce, args=(client, random.Random(2), acked))
            t.start()
            for _ in range(2):
                time.sleep(1.0)
                server.stop(keep_dir=True)
                time.sleep(0.5)
                server = server.restart()
            t.join(90)
            assert not t.is_alive()
        _wait(server.url, 120)
        rep = audit(server.url, recorder, acked)
        assert rep.errors == [], rep.errors[:20]
        errors = _audit_processes(server.url)
        assert errors == [], errors[:20]
        print(f"\nprocess restart scenario (everysec, stop x2): {rep.line()}")
    finally:
        workers.stop()
        server.stop()
