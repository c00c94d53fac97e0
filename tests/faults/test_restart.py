"""Scenario 2: redis-server restarted mid-load, with an append-only file. Workers and producers
reconnect by themselves; with ``appendfsync always`` even a crash (SIGKILL) loses nothing a client
was told was stored; with ``everysec`` a clean restart (SIGTERM) loses nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from audit import Workers, audit, mixed_tasks, produce, wait_finished
from redisproc import RedisProcess

from asynqpy import Client

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "20", "--lease", "3", "--heartbeat-interval", "0.5", "--shutdown-timeout", "0.5")


@pytest.mark.parametrize("fsync,how", [("always", "crash"), ("everysec", "stop")])
def test_redis_restart_mid_load(fsync: str, how: str, recorder: redis.Redis, recorder_server: RedisProcess,
                                tmp_path: Path) -> None:
    server = RedisProcess("--appendonly", "yes", "--appendfsync", fsync)
    tasks = mixed_tasks(1500, prefix=f"{fsync}-")
    acked: dict[str, int] = {}
    workers = Workers(server.url, recorder_server.url, 2, *WORKER_ARGS, log_dir=tmp_path)
    try:
        with Client(server.url) as client:
            producer = threading.Thread(target=produce, args=(client, tasks, acked), kwargs={"pause": 0.002})
            producer.start()
            for _ in range(2):  # two restarts while the producer runs and workers work
                time.sleep(1.0)
                server.crash() if how == "crash" else server.stop(keep_dir=True)
                time.sleep(0.5)  # down for half a second
                server = server.restart()
            producer.join(90)
            assert not producer.is_alive()
        wait_finished(server.url, len(tasks), timeout=60)
        rep = audit(server.url, recorder, acked)
        print(f"\nrestart scenario ({fsync}, {how} x2): {rep.line()}")
        assert len(acked) == len(tasks)
        assert rep.errors == [], rep.errors[:20]
        # reconnection backs off: a few warnings per outage, no log flood
        noise = [ln for ln in workers.logs().splitlines() if "connect" in ln.lower() or "Connection" in ln]
        assert len(noise) <= 2 * 2 * 40, noise[:50]
    finally:
        workers.stop()
        server.stop()
