"""Durable functions across a worker SIGKILL and a Redis crash, on a real redis-server (worker processes:
tests/durable_workers.py): a completed step never runs again; the step interrupted between its
end and the commit of its record runs again (at least once), with the same ``ctx.step_id``; a run
killed while sleeping resumes on its timer on another worker."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import pytest
import redis
from helpers import start_worker, wait_sync

from asynqpy import Client, DurableRun, Inspector

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


# -- the crash matrix (issue 46's "Guarantees to prove"): tests/durable_matrix.py ---------------------

STEPS = ("s1", "s2", "s3", "s4", "s5", "s6")
POINTS = (*(f"{w}:{s}" for s in ("s1", "s2", "s3", "s6") for w in ("before", "inside", "after")),
          "before:gather", "inside:s4", "inside:s5", "after:gather", "inside:task", "after:task", "before:wait",
          "sleep")
CLEAN = ["s1", "s2", 42, "s3", "ok", "s4", "s5", "s6"]  # what a run returns without a crash


def _again(point: str) -> set[str]:
    """The side effects a kill at ``point`` repeats: the interrupted step (both steps of the gather,
    which run and are recorded together), none for a kill between steps or during the sleep."""
    if point in ("inside:s4", "inside:s5"):
        return {"s4", "s5"}
    return {point.split(":")[1]} if point.startswith("inside:") else set()


def _matrix_worker(url: str) -> subprocess.Popen[bytes]:
    # (a lease of 5 s: a loaded machine's late heartbeat must not let a hanging run's lease expire
    # before the kill, which would run its step again in the first worker)
    return start_worker(url, "durable_matrix:mux", "--queues", Q, "--lease", "5", "--heartbeat-interval", "0.5",
                        "--concurrency", "30", env={"ASYNQPY_TEST_URL": url}, start_new_session=True)


@pytest.fixture(scope="module")
def matrix(redis_server: Any) -> dict[str, tuple[Any, dict[str, int]]]:
    """Every kill point's run (and one without a crash), all in one worker SIGKILLed once every run
    hangs at its point (the sleeping one asleep), then finished by a second worker: per point, the
    run's result and its side effects' counts."""
    url = redis_server.url
    r = redis.Redis.from_url(url)
    r.flushall()
    db1 = _db1(url)
    runs = {p: f"mx-{i}" for i, p in enumerate(POINTS)}
    for p, run in runs.items():
        if p != "sleep":
            db1.set(f"hang:{run}:{p}", 1)
    first = _matrix_worker(url)
    second = None
    try:
        with Client(url) as client, Inspector(url) as insp:
            started = {p: client.start("matrix", 8.0 if p == "sleep" else 0.05, id=run, queue=Q)
                       for p, run in runs.items()}
            clean = client.start("matrix", 0.05, id="mx-clean", queue=Q)
            for run in [*started.values(), clean]:
                try:
                    client.signal(run, "go", "ok", timeout=0)  # (sent before the waits: kept)
                except TimeoutError:
                    pass
            assert client.result(clean, timeout=60) == CLEAN
            wait_sync(lambda: db1.scard("hanging") == len(POINTS) - 1 and _status(insp, runs["sleep"]) == "sleeping",
                      60)
            _kill(first)
            second = _matrix_worker(url)
            got = {p: client.result(run, timeout=90) for p, run in started.items()}
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
    effects = {k.decode(): int(v) for k, v in db1.hgetall("effects").items()}
    out = {p: (got[p], {s: effects.get(f"{run}:{s}", 0) for s in (*STEPS, "task")}) for p, run in runs.items()}
    out["clean"] = (CLEAN, {s: effects.get(f"mx-clean:{s}", 0) for s in (*STEPS, "task")})
    return out


@pytest.mark.parametrize("point", [*POINTS, "clean"])
def test_crash_matrix_each_run_ends_as_without_the_crash_and_each_side_effect_happened_once(
        matrix: dict[str, tuple[Any, dict[str, int]]], point: str) -> None:
    result, counts = matrix[point]
    assert result == CLEAN
    again = _again(point)
    assert counts == {s: 2 if s in again else 1 for s in counts}, counts


def test_a_redis_crash_with_appendfsync_always_loses_no_step(tmp_path: Any) -> None:
    """redis-server SIGKILLed (AOF, fsync always) while a run's step is running, then restarted on
    its files: the run ends as without the crash; its steps ran once (the one running then at most
    twice: its lease may have expired while Redis was down)."""
    from redisproc import RedisProcess

    aof = ("--appendonly", "yes", "--appendfsync", "always")
    server = RedisProcess(*aof, dir=tmp_path)
    url = server.url
    db1 = _db1(url)
    db1.set("hang:rc:inside:s3", 1)
    worker = _matrix_worker(url)
    try:
        with Client(url) as client:
            run = client.start("matrix", 0.05, id="rc", queue=Q)
            try:
                client.signal(run, "go", "ok", timeout=0)
            except TimeoutError:
                pass
            wait_sync(lambda: db1.sismember("hanging", "rc"), 30)
            server.crash()
            server = RedisProcess(*aof, port=server.port, dir=tmp_path)
            _db1(url).set("release:rc", 1)
        with Client(url) as client:
            assert client.result(DurableRun("rc", Q), timeout=60) == CLEAN
        effects = {k.decode(): int(v) for k, v in _db1(url).hgetall("effects").items()}
    finally:
        _stop(worker)
        server.stop(keep_dir=True)
    assert effects.pop("rc:s3") in (1, 2)
    assert effects == {f"rc:{s}": 1 for s in (*STEPS, "task") if s != "s3"}
