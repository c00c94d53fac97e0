"""Health probes of a worker process (``Server(health_port=P)``, ``asynqpy worker --health-port P``):
``GET /livez`` and ``GET /readyz`` over HTTP, for an orchestrator's liveness and readiness checks.

- ``/livez``: 200 while the server's event loop answers: it ticks every second, and the probe
  fails (503) once the last tick is older than ``health_max_lag`` seconds (a handler blocking the
  loop, a deadlock). Redis being down does not fail it: restarting the process would not help.
- ``/readyz``: 200 when the server reaches Redis (a PING every second answered, tried twice:
  :class:`RedisReach`), registered (its first heartbeat written), taking tasks (not quiet) and not
  stopping; else 503. The body is JSON either way: ``{"live": ..., "ready": ...,
  "redis": ..., "registered": ..., "status": "running|quiet|stopping|starting", "loop_lag_s": ...}``.

The probes are served by the standard library's ``ThreadingHTTPServer`` on a daemon thread: they
answer even while the event loop is blocked (that is what ``/livez`` reports), and read only what
the loop last wrote, never Redis. Any other path is a 404.

Bounded, whoever connects (the port is unauthenticated, often bound to the pod's network): a
connection has :data:`READ_TIMEOUT` seconds in all to send its request and be answered, then it is
closed; at most :data:`MAX_CONNECTIONS` are open at once, and one more closes the oldest (a
probe's request takes milliseconds, so the ones held open are the idle ones). So connections that
send nothing, or a byte now and then, cost at most that many threads and descriptors, for seconds,
and a probe still gets its answer meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("asynqpy.probes")

TICK = 1.0
"""Seconds between two ticks of the event loop that ``/livez`` watches."""
READ_TIMEOUT = 5.0
"""Seconds a probe connection has, in all, to send its request and be answered; then it is closed."""
MAX_CONNECTIONS = 32
"""Probe connections open at once; one more closes the oldest (idle: a probe's takes milliseconds)."""


class BoundedHTTPServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` (a thread per connection) that bounds what connections hold: each
    is closed ``read_timeout`` seconds after it was accepted, whatever it is doing (a request that
    trickles in a byte at a time too), and accepting one over ``max_connections`` first closes the
    oldest. Also what the rules engine's probes use."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, read_timeout: float = READ_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.read_timeout, self.max_connections = read_timeout, max_connections
        self._open: dict[socket.socket, float] = {}  # connection -> when it is closed (monotonic)
        self._lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            while len(self._open) >= self.max_connections:
                self._drop(min(self._open, key=self._open.__getitem__))
            self._open[request] = time.monotonic() + self.read_timeout
        super().process_request(request, client_address)

    def service_actions(self) -> None:
        """(Called by ``serve_forever`` every poll interval.) Close the connections past their time."""
        now = time.monotonic()
        with self._lock:
            for conn in [c for c, until in self._open.items() if until <= now]:
                self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        """End a connection (its thread reads the end and finishes, closing it); lock held."""
        del self._open[conn]
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._open)


READY_PING = 1.0
"""Seconds between two PINGs of :class:`RedisReach` (what ``/readyz`` reports as ``redis``)."""
PING_TIMEOUT = 2.0
"""Seconds a PING of :class:`RedisReach` may take before it counts as failed."""


class RedisReach:
    """Whether Redis answers now, for ``/readyz``: a PING every :data:`READY_PING` seconds, through
    the process's own client and pool. A PING that fails is tried again at once (on a new
    connection: the pool drops the broken one) before Redis counts as unreachable, so a connection
    opened before a Redis restart, which fails once, does not make the server unready; and the first
    PING that succeeds makes it ready again. What the loops' calls failed meanwhile (the outage log)
    does not decide it: that bookkeeping only keeps the log to one line an outage."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.reached = False

    async def _ping(self) -> bool:
        from redis.exceptions import ResponseError

        from ..redisio.connection import REDIS_ERRORS

        try:
            await asyncio.wait_for(self.redis.ping(), PING_TIMEOUT)
            return True
        except ResponseError:  # Redis answered (e.g. NOPERM for PING under a role without it): reached
            return True
        except REDIS_ERRORS:
            return False
        except asyncio.TimeoutError:
            return False

    async def check(self) -> bool:
        """PING (again at once if it fails); record and return whether Redis answered."""
        self.reached = await self._ping() or await self._ping()
        return self.reached

    async def run(self) -> None:
        """Check every READY_PING seconds until cancelled."""
        while True:
            await self.check()
            await asyncio.sleep(READY_PING)


class Probes:
    """The probes' state (written by the event loop, read by the HTTP thread) and their server."""

    def __init__(self, host: str, port: int, max_lag: float, state: Callable[[], dict[str, Any]]) -> None:
        self.host, self.port, self.max_lag = host, port, max_lag
        self._state = state
        self._last_tick = time.monotonic()
        self._handle: asyncio.TimerHandle | None = None
        self._http: BoundedHTTPServer | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind the port (OSError if it cannot) and serve; start the loop's ticks."""
        probes = self

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_TIMEOUT  # (each read; the server closes the connection after READ_TIMEOUT in all)
            protocol_version = "HTTP/1.0"  # (one request a connection: none is kept open)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in ("/livez", "/readyz"):
                    self.send_error(404)
                    return
                report = probes.report()
                ok = report["live"] if path == "/livez" else report["ready"]
                body = json.dumps(report).encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("probe %s", format % args)

        self._http = BoundedHTTPServer((self.host, self.port), Handler, READ_TIMEOUT, MAX_CONNECTIONS)
        self.port = self._http.server_address[1]  # (port 0: the one the system chose)
        threading.Thread(target=self._http.serve_forever, args=(0.25,), name="asynqpy-probes", daemon=True).start()
        self._tick(loop)
        log.info("serving health probes on http://%s:%d/livez and /readyz", self.host, self.port)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._last_tick = time.monotonic()
        self._handle = loop.call_later(TICK, self._tick, loop)

    def report(self) -> dict[str, Any]:
        """What the probes answer (called on the HTTP thread)."""
        lag = max(0.0, time.monotonic() - self._last_tick - TICK)
        state = self._state()
        live = lag <= self.max_lag
        ready = live and state["redis"] and state["registered"] and state["status"] == "running"
        return {"live": live, "ready": ready, "loop_lag_s": round(lag, 3), **state}

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
