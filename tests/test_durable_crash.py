"""Durable functions across a worker SIGKILL, on a real redis-server (worker processes:
tests/durable_workers.py): a completed step never runs again; the step interrupted between its
end and the commit of its record runs again (at least once), with the same ``ctx.step_id``; a run
killed while sleeping resumes on its timer on another worker."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import redis
from helpers import start_worker, wait_sync

from asynqpy import Client, Inspector

pytestmark = [pytest.mark.real, pytest.mark.slow]

Q = "dq"
ARGS = ("--queues", Q, "--lease", "2", "--heartbeat-interval", "0.3", "--concurrency", "2")


def _db1(url: str) -> redis.Redis:
    return redis.Redis.from_url(url.rsplit("/", 1)[0] + "/1")


def _worker(url: str) -> subprocess.Popen[bytes]:
    return start_worker(url, "durable_workers:mux", *ARGS, env={"ASYNQPY_TEST_URL": url}, start_new_session=True)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            _kill(proc)


def _status(insp: Inspector, run: str) -> str:
    return str((insp.process(Q, run).state or {}).get("status"))


def test_a_worker_killed_between_a_steps_end_and_its_record_reruns_only_that_step(redis_url: str) -> None:
    db1 = _db1(redis_url)
    db1.flushdb()
    db1.set("hang:b", 1)
    first = _worker(redis_url)
    second = None
    try:
        with Client(redis_url) as client:
            run = client.start("crashy", 0.1, id="crash-1", queue=Q)
            wait_sync(lambda: db1.get("hanging") == b"b", 20)  # b's side effect done, its record not
            _kill(first)
            second = _worker(redis_url)
            assert client.result(run, timeout=40) == ["a", "b", "c"]
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
    assert db1.hgetall("effects") == {b"a": b"1", b"b": b"2", b"c": b"1"}  # a and c once; b again
    assert db1.smembers("keys:b") == {b"crash-1:3:b"}  # the same idempotency key on both runs of b


def test_a_run_killed_while_sleeping_resumes_on_its_timer(redis_url: str) -> None:
    db1 = _db1(redis_url)
    db1.flushdb()
    first = _worker(redis_url)
    second = None
    try:
        with Client(redis_url) as client, Inspector(redis_url) as insp:
            run = client.start("crashy", 1.5, id="crash-2", queue=Q)
            wait_sync(lambda: _status(insp, run.id) == "sleeping", 20)
            _kill(first)
            time.sleep(1.6)  # the timer falls due with no worker up
            assert _status(insp, run.id) == "sleeping"
            second = _worker(redis_url)
            assert client.result(run, timeout=40) == ["a", "b", "c"]
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
    assert db1.hgetall("effects") == {b"a": b"1", b"b": b"1", b"c": b"1"}
