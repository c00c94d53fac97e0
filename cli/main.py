"""``asynqpy``: run workers, enqueue tasks, see queue statistics.

User errors (bad arguments, unknown queue, Redis unreachable) print one line on stderr and exit
with code 2; anything unexpected exits with 1.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table

from asynqpy import Client, Inspector, ServeMux, Server
from asynqpy.connection import default_url
from asynqpy.errors import AsynqpyError

F = TypeVar("F", bound=Callable[..., Any])


class UserError(click.ClickException):
    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"asynqpy: error: {self.message}", err=True)


def user_errors(fn: F) -> F:
    """Turn library and connection errors into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AsynqpyError as exc:
            raise UserError(str(exc)) from None
        except RedisConnectionError as exc:
            raise UserError(f"cannot reach Redis: {exc}") from None
        except RedisError as exc:
            raise UserError(f"Redis error: {exc}") from None

    return wrapper  # type: ignore[return-value]


redis_url_option = click.option(
    "--redis-url", default=default_url, show_default="$ASYNQPY_REDIS_URL or redis://localhost:6379/0",
    help="Redis URL (redis://, rediss://, unix://, redis+cluster://h:p,h:p).",
)


def parse_queues(spec: str) -> dict[str, int]:
    """'critical=6,default=3,low' -> {'critical': 6, 'default': 3, 'low': 1}."""
    out: dict[str, int] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, weight = part.partition("=")
        try:
            out[name.strip()] = int(weight) if weight else 1
        except ValueError:
            raise UserError(f"bad queue weight in {part!r}: expected name=integer") from None
    if not out:
        raise UserError("--queues needs at least one queue")
    return out


def load_mux(target: str) -> ServeMux:
    """Import 'package.module:attribute' and return the ServeMux it names."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise UserError(f"expected module:attribute, got {target!r}")
    if module_name.startswith("."):
        raise UserError(f"cannot import {module_name!r}: give an absolute module name")
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"cannot import {module_name!r}: {exc}") from None
    mux = getattr(module, attr, None)
    if not isinstance(mux, ServeMux):
        raise UserError(f"{target!r} is not a ServeMux")
    return mux


@click.group()
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def main(log_level: str) -> None:
    """asynqpy: a task queue on Redis."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("target")
@click.option("--queues", "queues_spec", default="default=1", show_default=True,
              help="Queues and weights: critical=6,default=3,low=1.")
@click.option("--concurrency", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--processes", default=1, show_default=True, type=click.IntRange(min=1),
              help="Run N worker processes under a supervisor that restarts crashed ones.")
@click.option("--strict-priority", is_flag=True, help="Always serve higher-weight queues first.")
@click.option("--lease", default=30.0, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--heartbeat-interval", default=5.0, show_default=True, type=click.FloatRange(min=0.01))
@click.option("--shutdown-timeout", default=8.0, show_default=True, type=click.FloatRange(min=0))
@click.option("--unknown-type", default="retry", show_default=True, type=click.Choice(["retry", "archive"]))
@redis_url_option
@user_errors
def worker(target: str, queues_spec: str, concurrency: int, processes: int, strict_priority: bool,
           lease: float, heartbeat_interval: float, shutdown_timeout: float, unknown_type: str,
           redis_url: str) -> None:
    """Run a worker serving the ServeMux TARGET (module:attribute)."""
    queues = parse_queues(queues_spec)
    if processes > 1:
        from asynqpy.supervisor import supervise

        argv = [a for a in sys.argv[1:]]
        sys.exit(supervise(processes, _child_argv(argv)))
    mux = load_mux(target)
    server = Server(redis_url, queues=queues, concurrency=concurrency, strict_priority=strict_priority,
                    lease=lease, heartbeat_interval=heartbeat_interval, shutdown_timeout=shutdown_timeout,
                    unknown_type=unknown_type)
    server.run(mux)


def _child_argv(argv: list[str]) -> list[str]:
    """The worker command line for one child: the same, with --processes 1."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--processes":
            skip = True
            continue
        if a.startswith("--processes="):
            continue
        out.append(a)
    return [sys.executable, "-m", "asynqpy.cli.main", *out]


@main.command()
@click.argument("task_type")
@click.option("--payload", default=None, help="JSON payload (default: none).")
@click.option("--queue", default="default", show_default=True)
@click.option("--in", "process_in", default=None, type=float, help="Delay in seconds.")
@click.option("--max-retry", default=25, show_default=True, type=int)
@click.option("--timeout", default=None, type=float, help="Seconds per attempt (default: the server's).")
@click.option("--unique", default=None, type=float, help="Reject duplicates for this many seconds.")
@click.option("--task-id", default=None)
@click.option("--retention", default=0.0, show_default=True, type=float)
@redis_url_option
@user_errors
def enqueue(task_type: str, payload: str | None, queue: str, process_in: float | None, max_retry: int,
            timeout: float | None, unique: float | None, task_id: str | None, retention: float,
            redis_url: str) -> None:
    """Enqueue a task of TASK_TYPE."""
    try:
        value = json.loads(payload) if payload is not None else None
    except json.JSONDecodeError as exc:
        raise UserError(f"--payload is not valid JSON: {exc}") from None
    extra: dict[str, Any] = {}
    if timeout is not None:
        extra["timeout"] = timeout
    with Client(redis_url) as client:
        info = client.enqueue(task_type, value, queue=queue, process_in=process_in, max_retry=max_retry,
                              unique=unique, task_id=task_id, retention=retention, **extra)
    when = f" (due {info.next_process_at:%Y-%m-%d %H:%M:%S} UTC)" if info.next_process_at else ""
    click.echo(f"enqueued {info.id} to {info.queue}: {info.state.value}{when}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@redis_url_option
@user_errors
def stats(as_json: bool, redis_url: str) -> None:
    """Show every queue's tasks per state and its processed/failed counters."""
    insp = Inspector(redis_url)
    try:
        rows = insp.all_stats()
    finally:
        insp.close()
    if as_json:
        click.echo(json.dumps([{**s.__dict__, "size": s.size} for s in rows], indent=2))
        return
    if not rows:
        click.echo("no queues yet")
        return
    table = Table(title="asynqpy queues")
    for col in ("queue", "state", "pending", "active", "scheduled", "retry", "archived", "completed",
                "processed", "failed"):
        table.add_column(col, justify="left" if col in ("queue", "state") else "right", no_wrap=True)
    for s in rows:
        table.add_row(s.queue, "paused" if s.paused else "running", *(str(v) for v in (
            s.pending, s.active, s.scheduled, s.retry, s.archived, s.completed)),
            f"{s.processed_today} / {s.processed}", f"{s.failed_today} / {s.failed}")
    table.caption = "processed and failed: today (UTC) / total"
    Console(width=max(110, Console().width)).print(table)


if __name__ == "__main__":
    main()
