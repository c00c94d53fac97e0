"""Scenario 5: Redis reaches maxmemory (policy noeviction). Enqueue fails with RedisFullError and
stores nothing; nothing already queued is lost; running tasks keep their leases; a worker started
while Redis is full drains the queue."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import redis
from audit import Workers, audit, wait_finished
from redisproc import RedisProcess

from asynqpy import Client, RedisFullError

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_full_redis_refuses_enqueues_loses_nothing_and_drains(
    recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    server = RedisProcess("--maxmemory", "2mb", "--maxmemory-policy", "noeviction")  # (4mb: 8 000 tasks)
    r = redis.Redis.from_url(server.url)
    acked: dict[str, int] = {}
    refused = 0
    workers = None
    try:
        with Client(server.url) as client:
            for i in range(200_000):
                id = f"m{i}"
                try:  # tasks long enough (1.5 s) to need lease renewals while Redis is full
                    client.enqueue("job", {"ms": 1500 if i < 20 else 0, "pad": "x" * 200}, task_id=id, retention=3600)
                except RedisFullError as exc:
                    assert "maxmemory" in str(exc)
                    refused += 1
                    # nothing of the refused task was stored
                    assert r.hget("asynqpy:{default}:t", id) is None
                    if refused >= 3:
                        break
                    continue
                acked[id] = 0
            assert refused == 3 and len(acked) > 1000
            with pytest.raises(RedisFullError):
                client.enqueue_many([("job", {"ms": 0}) for _ in range(50)])
            assert r.llen("asynqpy:{default}:pending") == len(acked)
        # a worker started while Redis is full; lease 1 s < the 1.5 s tasks: renewals must work
        workers = Workers(server.url, recorder_server.url, 1, "--concurrency", "20", "--lease", "1",
                          "--heartbeat-interval", "0.2", log_dir=tmp_path)
        wait_finished(server.url, len(acked), timeout=90)
        rep = audit(server.url, recorder, acked)
        print(f"\nmaxmemory scenario: {refused} enqueues refused; {rep.line()}")
        assert rep.errors == [], rep.errors[:20]
        assert rep.reruns == 0 and rep.lease_reruns == 0  # no lease was lost while Redis was full
    finally:
        if workers:
            workers.stop()
        server.stop()


def test_evicting_policy_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from helpers import serving

    from asynqpy import ServeMux

    server = RedisProcess("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    try:
        async def main() -> None:
            async with serving(server.url, ServeMux()):
                await asyncio.sleep(0.05)

        with caplog.at_level(logging.WARNING, logger="asynqpy.server"):
            asyncio.run(main())
        assert any("allkeys-lru" in rec.getMessage() and "noeviction" in rec.getMessage() for rec in caplog.records)
    finally:
        server.stop()
