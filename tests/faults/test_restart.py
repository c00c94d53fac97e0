"""Scenario 2: redis-server restarted mid-load, with an append-only file. Workers and producers
reconnect by themselves; with ``appendfsync always`` even a crash (SIGKILL) loses nothing a client
was told was stored; with ``everysec`` a clean restart (SIGTERM) loses nothing."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from audit import Workers, audit, mixed_tasks, produce, storm, wait_finished
from redisproc import RedisProcess

from asynqpy import Client, RedisUnavailableError, TaskNotFoundError

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "20", "--lease", "3", "--heartbeat-interval", "0.5", "--shutdown-timeout", "0.5")


CALL_TIMEOUT = 20.0


def _caller(url: str, stop: threading.Event, prefix: str, out: list[tuple[str, Any, float]]) -> None:
    """Client.call again and again while Redis restarts: each call must end with its result or a
    clear error within its timeout (never hang)."""
    with Client(url) as client:
        i = 0
        while not stop.is_set():
            id, t0 = f"{prefix}{i}", time.monotonic()
            try:
                got: Any = client.call("job", {"ms": 20}, task_id=id, timeout=CALL_TIMEOUT, retry_delay=0.1)
            except (RedisUnavailableError, TaskNotFoundError, TimeoutError) as exc:
                got = exc
                time.sleep(0.05)  # Redis is down: try again a little later, as a caller would
            out.append((id, got, time.monotonic() - t0))
            i += 1


@pytest.mark.parametrize("fsync,how", [("always", "crash"), ("everysec", "stop")])
def test_redis_restart_mid_load(fsync: str, how: str, recorder: redis.Redis, recorder_server: RedisProcess,
                                tmp_path: Path) -> None:
    server = RedisProcess("--appendonly", "yes", "--appendfsync", fsync)
    n, pause = storm(1500, 0.002)
    tasks = mixed_tasks(n, prefix=f"{fsync}-")
    acked: dict[str, int] = {}
    workers = Workers(server.url, recorder_server.url, 2, *WORKER_ARGS, log_dir=tmp_path)
    calls: list[tuple[str, Any, float]] = []
    stop_calling = threading.Event()
    caller = threading.Thread(target=_caller, args=(server.url, stop_calling, f"{fsync}-call", calls))
    try:
        with Client(server.url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked), kwargs={"pause": pause})
            producer.start()
            caller.start()
            for _ in range(2):  # two restarts while the producer runs and workers work
                time.sleep(1.0)
                server.crash() if how == "crash" else server.stop(keep_dir=True)
                time.sleep(0.5)  # down for half a second
                server = server.restart()
            producer.join(90)
            assert not producer.is_alive()
            stop_calling.set()
            caller.join(CALL_TIMEOUT + 10)
            assert not caller.is_alive(), "a call hung"
        wait_finished(server.url, len(tasks), timeout=60)
        rep = audit(server.url, recorder, acked)
        print(f"\nrestart scenario ({fsync}, {how} x2): {rep.line()}")
        assert len(acked) == len(tasks)
        assert rep.errors == [], rep.errors[:20]
        answered = [id for id, got, _ in calls if isinstance(got, str)]
        assert all(got.split("|")[0] == id for id, got, _ in calls if isinstance(got, str))
        assert all(took < CALL_TIMEOUT + 2 for _, _, took in calls), max(took for _, _, took in calls)
        errors = Counter(type(got).__name__ for _, got, _ in calls if not isinstance(got, str))
        print(f"callers ({fsync}, {how}): {len(answered)} answered, errors: {dict(errors)}")
        assert len(answered) >= 10  # calls go through between the outages (32 at a load of 37); those caught by one fail clearly
        assert set(errors) <= {"RedisUnavailableError", "TaskNotFoundError"}, errors
        # reconnection backs off: a few warnings per outage, no log flood
        noise = [ln for ln in workers.logs().splitlines() if "connect" in ln.lower() or "Connection" in ln]
        assert len(noise) <= 2 * 2 * 40, noise[:50]
    finally:
        workers.stop()
        server.stop()
