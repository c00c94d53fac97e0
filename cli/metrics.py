"""``asynqpy metrics``: serve the queue metrics for Prometheus (the ``metrics`` extra)."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from .common import UserError, echo, redis_url_option, user_errors


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=9876, show_default=True,
              help="The port to serve /metrics on.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to bind (0.0.0.0: every interface, for a Prometheus on another host).")
@click.option("--top-tenants", type=click.IntRange(0, 1000), default=10, show_default=True,
              help="Tenants per queue with series of their own (those with the most pending tasks; 0: none).")
@redis_url_option
@user_errors
def metrics(port: int, host: str, top_tenants: int, redis_url: str) -> None:
    """Serve every queue's metrics (tasks by state, size, latency, memory, processed, failed,
    paused; named after asynq's exporter with the asynqpy_ prefix) on http://HOST:PORT/metrics,
    read from Redis at each scrape, until SIGTERM or Ctrl-C."""
    from asynqpy.metrics import serve_queue_metrics

    try:
        httpd = serve_queue_metrics(redis_url, port, host, top_tenants)
    except OSError as exc:
        raise UserError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    echo(f"serving queue metrics on http://{host}:{httpd.server_port}/metrics (Ctrl-C stops)")
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    done.wait()
    httpd.shutdown()
