"""Health probes (``Server(health_port=P)``, ``asynqpy worker --health-port P``, worker/probes.py):
/livez follows the event loop, /readyz the server's connection, registration and status, on a
real redis-server that the tests stop and start again; bad settings refused (typed error, CLI
exit 2)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner
from redisproc import RedisProcess, free_port

from asynqpy import Client, Inspector, InvalidArgumentError, ServeMux, Server, Task
from asynqpy.cli.main import main

pytestmark = pytest.mark.real


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, json.loads(body) if body.startswith(b"{") else {}
    except urllib.error.URLError:  # not listening (yet)
        return 0, {}


def until(cond: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def serve(url: str, mux: ServeMux, **options: Any) -> tuple[Server, threading.Thread]:
    server = Server(url, queues=["hq"], heartbeat_interval=0.2, shutdown_timeout=2, **options)
    t = threading.Thread(target=lambda: asyncio.run(server.arun(mux)), daemon=True)
    t.start()
    return server, t


def test_ready_while_serving_not_when_quiet_or_redis_is_gone() -> None:
    redis = RedisProcess()
    port = free_port()
    server, t = serve(redis.url, ServeMux(), health_port=port)
    try:
        until(lambda: probe(port, "/readyz")[0] == 200)
        code, body = probe(port, "/livez")
        assert code == 200 and body["live"] and body["ready"] and body["status"] == "running", body
        assert probe(port, "/nope")[0] == 404
        with Inspector(redis.url) as insp:
            assert insp.quiet_server(server.server_id) == "quiet"
            code, body = probe(port, "/readyz")
            assert code == 503 and body["status"] == "quiet" and body["live"], body
            assert insp.resume_server(server.server_id) == "running"
        until(lambda: probe(port, "/readyz")[0] == 200)
        redis.crash()  # Redis gone: not ready, still live (a restart would not help)
        until(lambda: probe(port, "/readyz")[1].get("redis") is False)
        assert probe(port, "/readyz")[0] == 503 and probe(port, "/livez")[0] == 200
        redis = redis.restart()
        until(lambda: probe(port, "/readyz")[0] == 200, 30)
    finally:
        server.stop()
        t.join(15)
        redis.stop()
    with pytest.raises(OSError):  # the probes' port is closed with the server
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_live_follows_the_event_loop() -> None:
    """A handler that blocks the loop (time.sleep in an async def) fails /livez after
    health_max_lag, and /livez answers 200 again once the loop runs."""
    redis = RedisProcess()
    port = free_port()
    release = threading.Event()
    mux = ServeMux()

    @mux.handle("block")
    async def block(task: Task) -> None:
        release.wait(10)  # blocks the event loop on purpose

    server, t = serve(redis.url, mux, health_port=port, health_max_lag=0.5, block_warning=None)
    try:
        until(lambda: probe(port, "/readyz")[0] == 200)
        with Client(redis.url) as c:
            c.enqueue("block", None, queue="hq")
        until(lambda: probe(port, "/livez")[0] == 503)
        code, body = probe(port, "/readyz")
        assert code == 503 and not body["live"] and body["loop_lag_s"] > 0.5, body
        release.set()
        until(lambda: probe(port, "/livez")[0] == 200)
    finally:
        release.set()
        server.stop()
        t.join(15)
        redis.stop()


def test_bad_probe_settings_are_refused(redis_url: str) -> None:
    for bad in ({"health_port": -1}, {"health_port": 70000}, {"health_port": "80"}, {"health_host": ""},
                {"health_max_lag": 0}):
        with pytest.raises(InvalidArgumentError, match="health_"):
            Server(redis_url, **bad)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidArgumentError, match=f"cannot serve the probes on 127.0.0.1:{port}"):
            asyncio.run(Server(redis_url, health_port=port).arun(ServeMux()))
    res = CliRunner().invoke(main, ["worker", "x:y", "--health-port", "8080", "--processes", "2",
                                    "--redis-url", redis_url])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "--health-port" in res.stderr, res.output
    res = CliRunner().invoke(main, ["worker", "x:y", "--health-port", "abc", "--redis-url", redis_url])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "--health-port" in res.stderr, res.output


def test_idle_connections_are_closed_and_capped_while_probes_answer(redis_url: str, monkeypatch: Any) -> None:
    """Issue 42 #14: connections that send part of a request (or nothing) were each held open
    forever by a thread of the worker, until its descriptors ran out. Now each is closed
    READ_TIMEOUT after it was accepted, at most MAX_CONNECTIONS are open (one more closes the
    oldest), and /livez answers throughout."""
    from asynqpy.worker import probes

    monkeypatch.setattr(probes, "READ_TIMEOUT", 1.0)
    monkeypatch.setattr(probes, "MAX_CONNECTIONS", 8)
    port = free_port()
    server, t = serve(redis_url, ServeMux(), health_port=port)
    conns: list[socket.socket] = []
    try:
        until(lambda: probe(port, "/readyz")[0] == 200)
        threads = threading.active_count()
        for i in range(60):
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            c.sendall(b"GET /livez HTTP/1.1\r\n" if i % 2 else b"G")  # never the end of the headers
            conns.append(c)
        assert probe(port, "/livez")[0] == 200  # a probe gets in, whatever is held
        assert threading.active_count() <= threads + 8 + 2
        started = time.monotonic()

        def closed(c: socket.socket) -> bool:
            c.settimeout(0.01)
            try:
                return c.recv(1) == b""
            except TimeoutError:
                return False
            except OSError:
                return True

        until(lambda: all(closed(c) for c in conns), 10)
        assert time.monotonic() - started < 5  # closed by the deadline, not by the test's end
        until(lambda: threading.active_count() <= threads)
        assert probe(port, "/livez")[0] == 200
    finally:
        for c in conns:
            c.close()
        server.stop()
        t.join(15)


def test_ready_follows_redis_back_without_flapping() -> None:
    """Issue 42 #24: after Redis came back, /readyz went 200, 503, 200 over ~10 s (once 503 for 6 s
    while tasks already ran): one failed call on a connection opened before the restart marked the
    server down again, for as long as the outage log's grace. Readiness now follows a PING of its
    own (tried again at once on a new connection): ready soon after Redis answers, and it stays
    ready while tasks run, on a redis-server stopped and started again."""
    redis = RedisProcess()
    port = free_port()
    ran: list[int] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    server, th = serve(redis.url, mux, health_port=port, concurrency=8)
    try:
        until(lambda: probe(port, "/readyz")[0] == 200)
        with Client(redis.url) as c:  # connections in the worker's pool, opened before the restart
            for i in range(20):
                c.enqueue("t", i, queue="hq")
        until(lambda: len(ran) == 20)
        for _ in range(2):
            redis.crash()
            until(lambda: probe(port, "/readyz")[1].get("redis") is False)
            assert probe(port, "/livez")[0] == 200
            redis = redis.restart()
            came = time.monotonic()
            until(lambda: probe(port, "/readyz")[0] == 200, 10)
            assert time.monotonic() - came < 5  # ready within seconds of Redis answering
            with Client(redis.url) as c:
                for i in range(20):
                    c.enqueue("t", i, queue="hq")
            seen = []
            end = time.monotonic() + 8  # longer than the outage log's grace and a heartbeat
            while time.monotonic() < end:
                seen.append(probe(port, "/readyz")[0])
                time.sleep(0.05)
            assert set(seen) == {200}, f"/readyz flapped after Redis came back: {seen}"
    finally:
        server.stop()
        th.join(15)
        redis.stop()
