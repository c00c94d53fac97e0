"""Health probes of a worker process (``Server(health_port=P)``, ``asynqpy worker --health-port P``):
``GET /livez`` and ``GET /readyz`` over HTTP, for an orchestrator's liveness and readiness checks.

- ``/livez``: 200 while the server's event loop answers: it ticks every second, and the probe
  fails (503) once the last tick is older than ``health_max_lag`` seconds (a handler blocking the
  loop, a deadlock). Redis being down does not fail it: restarting the process would not help.
- ``/readyz``: 200 when the server is connected to Redis (no outage under way: the same
  bookkeeping that logs outages), registered (its first heartbeat written), taking tasks (not
  quiet) and not stopping; else 503. The body is JSON either way: ``{"live": ..., "ready": ...,
  "redis": ..., "registered": ..., "status": "running|quiet|stopping|starting", "loop_lag_s": ...}``.

The probes are served by the standard library's ``ThreadingHTTPServer`` on a daemon thread: they
answer even while the event loop is blocked (that is what ``/livez`` reports), and read only what
the loop last wrote, never Redis. Any other path is a 404.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("asynqpy.probes")

TICK = 1.0
"""Seconds between two ticks of the event loop that ``/livez`` watches."""


class Probes:
    """The probes' state (written by the event loop, read by the HTTP thread) and their server."""

    def __init__(self, host: str, port: int, max_lag: float, state: Callable[[], dict[str, Any]]) -> None:
        self.host, self.port, self.max_lag = host, port, max_lag
        self._state = state
        self._last_tick = time.monotonic()
        self._handle: asyncio.TimerHandle | None = None
        self._http: ThreadingHTTPServer | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind the port (OSError if it cannot) and serve; start the loop's ticks."""
        probes = self

        class Handler(BaseHTTPRequestHandler):
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

        self._http = ThreadingHTTPServer((self.host, self.port), Handler)
        self.port = self._http.server_address[1]  # (port 0: the one the system chose)
        threading.Thread(target=self._http.serve_forever, name="asynqpy-probes", daemon=True).start()
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
