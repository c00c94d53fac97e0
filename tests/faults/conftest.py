"""Fixtures of the fault-injection suite: a recorder redis-server (separate from the one under
test, so records survive restarts, pauses and memory limits of the latter) and a log directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redisproc import RedisProcess


@pytest.fixture(scope="session")
def recorder_server() -> Iterator[RedisProcess]:
    proc = RedisProcess()
    yield proc
    proc.stop()


@pytest.fixture
def recorder(recorder_server: RedisProcess) -> redis.Redis:
    r = redis.Redis.from_url(recorder_server.url)
    r.flushall()
    return r
