"""Issue 10: what a newcomer trips on, one test per behaviour: tracebacks (logged and kept),
naive datetimes (local time), one log line per Redis outage, waiting for Redis at start, Redis
errors inside the AsynqpyError hierarchy, a burst spread across servers, the blocked event loop
warning, a second Ctrl-C, start/finish logs, the server record after a Redis restart, queues
registered by enqueues only, and the library's error messages."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import ROOT, serve_until, serving, stats, until
from redisproc import RedisProcess, free_port

from asynqpy import (
    AsyncClient,
    AsynqpyError,
    Client,
    Inspector,
    InvalidArgumentError,
    PayloadError,
    RedisUnavailableError,
    ResultError,
    ServeMux,
    Server,
    Task,
    TaskState,
)
from asynqpy.core.model.options import prepare


def _lookup(d: dict[str, Any]) -> Any:
    return d["missing"]


# -- 1. tracebacks ---------------------------------------------------------------------------


def test_a_failed_attempt_logs_its_traceback_and_keeps_it(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(backend.sync)
    mux = ServeMux()

    @mux.handle("fails")
    async def fails(task: Task) -> None:
        _lookup({})

    id = client.enqueue("fails", max_retry=0).id
    caplog.set_level(logging.WARNING, logger="asynqpy")

    serve_until(backend, mux, lambda: stats(backend).archived == 1)
    failed = [r for r in caplog.records if "task failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None  # once, with the traceback
    assert f"id={id} type=fails queue=default attempt=1" in failed[0].getMessage()
    logged = logging.Formatter().formatException(failed[0].exc_info)
    assert "_lookup" in logged and "KeyError: 'missing'" in logged
    info = Inspector(backend.sync).task_info("default", id)
    assert info.last_error == "KeyError: 'missing'"
    assert "in _lookup" in info.traceback and info.traceback.rstrip().endswith("KeyError: 'missing'")


# -- 2. naive datetimes ------------------------------------------------------------------------


@pytest.fixture
def tz() -> Iterator[Any]:
    old = os.environ.get("TZ")

    def set_tz(name: str) -> None:
        os.environ["TZ"] = name
        time.tzset()

    yield set_tz
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York", "UTC"])
def test_a_naive_datetime_is_local_time(tz: Any, zone: str) -> None:
    tz(zone)
    p = prepare("t", process_at=datetime.now() + timedelta(minutes=10))
    assert abs(p.delay_ms - 600_000) < 2_000  # ten minutes from now, in any time zone (was 9 h off in Tokyo)
    d = prepare("t", deadline=datetime.now() + timedelta(hours=1))
    assert abs(d.msg.deadline_ms / 1000 - (time.time() + 3600)) < 2


# -- 3. one line per outage, 4. waiting for Redis at start -------------------------------------


def _outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("asynqpy")]


@pytest.mark.real
@pytest.mark.slow
def test_a_redis_outage_logs_one_line_lost_and_one_back(caplog: pytest.LogCaptureFixture) -> None:
    server = RedisProcess()
    caplog.set_level(logging.DEBUG, logger="asynqpy")
    ran: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.id)

    async def main() -> None:
        nonlocal server
        async with serving(server.url, mux, heartbeat_interval=0.2, lease=2, idle_timeout=1,
                           recover_interval=0.3, janitor_interval=0.3):
            await asyncio.sleep(0.5)
            caplog.clear()
            server.stop(keep_dir=True)
            await asyncio.sleep(4)  # every loop fails many times meanwhile
            server = server.restart()
            with Client(server.url) as c:
                c.enqueue("t")
            await until(lambda: len(ran) == 1, timeout=15)
            await until(lambda: any("is back" in m for m in _outage_lines(caplog)), timeout=10)

    try:
        asyncio.run(main())
    finally:
        server.stop()
    lines = _outage_lines(caplog)
    assert sum("lost the connection to Redis" in m for m in lines) == 1, lines
    assert sum("connection to Redis is back after" in m for m in lines) == 1, lines
    assert len(lines) <= 3, lines  # (was ~3.5 lines a second)


@pytest.mark.real
def test_a_worker_started_before_redis_waits_for_it(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    ran: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.id)

    caplog.set_level(logging.WARNING, logger="asynqpy")

    servers: list[RedisProcess] = []

    async def main() -> None:
        async with serving(url, mux):
            await asyncio.sleep(1.0)  # Redis is not there yet: the server waits, it does not exit
            servers.append(RedisProcess(port=port))
            with Client(url) as c:
                c.enqueue("t")
            await until(lambda: len(ran) == 1, timeout=15)

    try:
        asyncio.run(main())
    finally:
        for s in servers:
            s.stop()
    lines = _outage_lines(caplog)
    assert sum("cannot reach Redis" in m for m in lines) == 1, lines


def test_fail_fast_exits_when_redis_is_down() -> None:
    mux = ServeMux()
    server = Server(f"redis://127.0.0.1:{free_port()}/0", fail_fast=True)
    with pytest.raises(RedisUnavailableError):
        asyncio.run(asyncio.wait_for(server.arun(mux), 10))


# -- 5. errors inside the hierarchy ------------------------------------------------------------


def test_redis_unreachable_is_an_asynqpy_error_everywhere() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with Client(url) as c:
        with pytest.raises(AsynqpyError) as caught:
            c.enqueue("t")
    err = caught.value
    assert isinstance(err, RedisUnavailableError) and isinstance(err, redis.ConnectionError)
    assert isinstance(err.__cause__, redis.ConnectionError) and str(err).startswith("cannot reach Redis: ")
    with Inspector(url) as insp, pytest.raises(RedisUnavailableError):
        insp.queues()

    async def main() -> None:
        async with AsyncClient(url) as ac:
            with pytest.raises(RedisUnavailableError):
                await ac.enqueue("t")

    asyncio.run(main())


# -- 6. a burst spread across servers (and so across --processes) -----------------------------


@pytest.mark.real
def test_fair_dispatch_spreads_a_burst_across_servers(redis_url: str) -> None:
    got: dict[str, list[str]] = {"A": [], "B": []}

    def mux_of(name: str) -> ServeMux:
        mux = ServeMux()

        @mux.handle("cpu")
        def cpu(task: Task) -> None:  # a plain def handler: it runs in a thread of its server
            got[name].append(task.id)
            time.sleep(0.3)

        return mux

    async def main() -> None:
        async with serving(redis_url, mux_of("A"), fair_dispatch=True), \
                serving(redis_url, mux_of("B"), fair_dispatch=True):
            await asyncio.sleep(0.5)  # both idle, blocked in their wait
            with Client(redis_url) as c:
                c.enqueue_many([("cpu", i) for i in range(4)])
            await until(lambda: len(got["A"]) + len(got["B"]) == 4, timeout=10)

    asyncio.run(main())
    assert sorted([len(got["A"]), len(got["B"])]) == [2, 2], got


# -- 7. a blocked event loop ------------------------------------------------------------------


def test_a_blocking_async_handler_is_named_in_a_warning(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(backend.sync)
    mux = ServeMux()

    @mux.handle("blocker")
    async def blocker(task: Task) -> None:
        time.sleep(1.0)  # the mistake: a blocking call in an async def handler

    client.enqueue("blocker")
    caplog.set_level(logging.WARNING, logger="asynqpy")

    async def main() -> None:
        async with serving(backend.new_async(), mux, block_warning=0.3):
            await until(lambda: stats(backend).processed == 1)
            await until(lambda: any("event loop was blocked" in r.getMessage() for r in caplog.records), timeout=5)

    asyncio.run(main())
    [line] = [r.getMessage() for r in caplog.records if "event loop was blocked" in r.getMessage()]
    assert "task type=blocker" in line  # which task blocked the loop
    assert "test_newcomer.py" in line and "in blocker" in line  # and where


# -- 8. a second Ctrl-C ------------------------------------------------------------------------


WORKER_SCRIPT = """
import asyncio, sys
from asynqpy import ServeMux, Server, Task
mux = ServeMux()

@mux.handle("long")
async def long(task: Task) -> None:
    print("started", flush=True)
    await asyncio.sleep(60)

Server(sys.argv[1], shutdown_timeout=30).run(mux)
"""


@pytest.mark.real
def test_a_second_ctrl_c_requeues_at_once(redis_url: str, tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text(WORKER_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), redis_url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        with Client(redis_url) as c:
            id = c.enqueue("long").id
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"started"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the first Ctrl-C waits for the task (up to 30 s)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        assert time.monotonic() - t0 < 5
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert "press Ctrl-C again to stop now" in err and "stopping now" in err
        info = Inspector(redis_url).task_info("default", id)
        assert info.state is TaskState.PENDING and info.retried == 0  # put back, nothing counted
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- 9. start and finish logs -----------------------------------------------------------------


def test_start_and_success_are_logged_at_debug(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(backend.sync)
    mux = ServeMux()

    @mux.handle("ok")
    async def ok(task: Task) -> None:
        pass

    id = client.enqueue("ok").id
    caplog.set_level(logging.DEBUG, logger="asynqpy.processor")

    serve_until(backend, mux, lambda: stats(backend).processed == 1)
    fields = f"id={id} type=ok queue=default attempt=1"
    msgs = [r.getMessage() for r in caplog.records]
    assert f"task started: {fields}" in msgs
    [done] = [r for r in caplog.records if r.getMessage().startswith("task succeeded in")]
    assert done.levelno == logging.DEBUG and fields in done.getMessage() and done.task_id == id  # type: ignore[attr-defined]


def test_json_log_format_carries_the_task_fields() -> None:
    import json

    from asynqpy.worker.logs import JsonFormatter

    record = logging.LogRecord("asynqpy.processor", logging.WARNING, "x.py", 1, "task failed: %s", ("id=1",), None)
    record.task_id, record.task_type, record.attempt = "1", "t", 2
    out = json.loads(JsonFormatter().format(record))
    assert out["message"] == "task failed: id=1" and out["task_id"] == "1" and out["attempt"] == 2
    assert out["level"] == "WARNING" and out["time"].endswith("+00:00")


# -- 10. the server record after a Redis restart ----------------------------------------------


def test_server_record_is_written_again_as_soon_as_it_is_missing(backend: Any) -> None:
    mux = ServeMux()
    insp = Inspector(backend.sync)

    async def main() -> None:
        async with serving(backend.new_async(), mux, heartbeat_interval=0.5):
            await until(lambda: len(insp.servers()) == 1)
            await asyncio.sleep(0.6)
            backend.sync.flushall()  # a Redis restarted without persistence
            assert insp.servers() == []
            await until(lambda: len(insp.servers()) == 1, timeout=1.5)  # the next beat, not the 6th

    asyncio.run(main())


# -- 11. queues are registered by enqueues ------------------------------------------------------


def test_a_queue_only_served_is_not_registered(backend: Any) -> None:
    mux = ServeMux()
    insp = Inspector(backend.sync)

    async def main() -> None:
        async with serving(backend.new_async(), mux, queues={"nope": 1, "default": 1}):
            await until(lambda: len(insp.servers()) == 1)
            assert insp.queues() == []  # a typo in --queues stays out of `stats`
            Client(backend.sync).enqueue("t", queue="default")
            assert insp.queues() == ["default"]

    asyncio.run(main())


# -- errors that help ---------------------------------------------------------------------------


def test_error_messages_name_what_is_wrong(backend: Any) -> None:
    c = Client(backend.sync)
    with pytest.raises(PayloadError, match="integers must fit in 64 bits"):
        c.enqueue("t", 2 ** 70)
    with pytest.raises(InvalidArgumentError, match=r"unknown enqueue option: 'retries' \(did you mean 'max_retry'\?\)"):
        c.enqueue("t", retries=3)
    with pytest.raises(InvalidArgumentError, match=r"unknown server option: 'concurreny' \(did you mean 'concurrency'\?\)"):
        Server(backend.sync, concurreny=3)
    insp = Inspector(backend.sync)
    assert insp.task_info("default", c.enqueue("t").id).timeout is None  # the server's default
    assert insp.task_info("default", c.enqueue("t", timeout=None).id).timeout == 0.0  # no limit
    assert insp.task_info("default", c.enqueue("t", timeout=2.5).id).timeout == 2.5


def test_write_result_refuses_what_cannot_be_stored_and_the_task_is_not_retried(backend: Any) -> None:
    client = Client(backend.sync)
    mux = ServeMux()
    errors: list[BaseException] = []

    @mux.handle("returns")
    async def returns(task: Task) -> None:
        try:
            task.write_result(datetime.now())
        except ResultError as exc:
            errors.append(exc)
            raise

    id = client.enqueue("returns", retention=60).id

    serve_until(backend, mux, lambda: stats(backend).archived == 1)
    assert "result is not msgpack-serializable" in str(errors[0]) and "datetime" in str(errors[0])
    info = Inspector(backend.sync).task_info("default", id)
    assert info.state is TaskState.ARCHIVED and info.retried == 0  # its side effects ran: not retried


def test_timeout_error_says_what_the_timeout_was(backend: Any) -> None:
    client = Client(backend.sync)
    mux = ServeMux()

    @mux.handle("slow")
    async def slow(task: Task) -> None:
        await asyncio.sleep(5)

    id = client.enqueue("slow", timeout=0.2, max_retry=0).id

    serve_until(backend, mux, lambda: stats(backend).archived == 1)
    info = Inspector(backend.sync).task_info("default", id)
    assert info.last_error == "TaskTimeoutError: the handler ran past the task's timeout (0.2s)"


def test_an_unknown_task_type_logs_one_line_per_attempt(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client(backend.sync)
    client.enqueue("nobody-handles-this", max_retry=0)
    caplog.set_level(logging.WARNING, logger="asynqpy")

    serve_until(backend, ServeMux(), lambda: stats(backend).archived == 1)
    lines = [r for r in caplog.records if "nobody-handles-this" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING and lines[0].exc_info is None

