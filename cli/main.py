"""``asynqpy``: run workers, enqueue tasks, inspect and control queues, tasks and servers.

The command tree: ``worker``, ``enqueue``, ``stats``, ``queue ...``, ``task ...``, ``server ...``
(and ``dash``, registered by cli/dash.py). User errors (bad arguments, unknown queue or task, a
task in a state that forbids the action, Redis unreachable) print one line on stderr and exit with
code 2; anything unexpected exits with 1.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from typing import Any

import click

from asynqpy import Client, ServeMux, Server

from .common import UserError, redis_url_option, signing_key_option, signing_keys, user_errors
from .dash import dash
from .queue import queue
from .server import server
from .stats import stats
from .task import task

__all__ = ["UserError", "main", "redis_url_option", "user_errors"]

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
@signing_key_option
@redis_url_option
@user_errors
def worker(target: str, queues_spec: str, concurrency: int, processes: int, strict_priority: bool,
           lease: float, heartbeat_interval: float, shutdown_timeout: float, unknown_type: str,
           signing_key_file: str | None, redis_url: str) -> None:
    """Run a worker serving the ServeMux TARGET (module:attribute)."""
    queues = parse_queues(queues_spec)
    keys = signing_keys(signing_key_file)  # checked before any child process starts
    if processes > 1:
        from asynqpy.supervisor import supervise

        argv = [a for a in sys.argv[1:]]
        sys.exit(supervise(processes, _child_argv(argv)))
    mux = load_mux(target)
    server = Server(redis_url, queues=queues, concurrency=concurrency, strict_priority=strict_priority,
                    lease=lease, heartbeat_interval=heartbeat_interval, shutdown_timeout=shutdown_timeout,
                    unknown_type=unknown_type, signing_key=keys)
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
@signing_key_option
@redis_url_option
@user_errors
def enqueue(task_type: str, payload: str | None, queue: str, process_in: float | None, max_retry: int,
            timeout: float | None, unique: float | None, task_id: str | None, retention: float,
            signing_key_file: str | None, redis_url: str) -> None:
    """Enqueue a task of TASK_TYPE."""
    try:
        value = json.loads(payload) if payload is not None else None
    except json.JSONDecodeError as exc:
        raise UserError(f"--payload is not valid JSON: {exc}") from None
    extra: dict[str, Any] = {}
    if timeout is not None:
        extra["timeout"] = timeout
    with Client(redis_url, signing_key=signing_keys(signing_key_file)) as client:
        info = client.enqueue(task_type, value, queue=queue, process_in=process_in, max_retry=max_retry,
                              unique=unique, task_id=task_id, retention=retention, **extra)
    when = f" (due {info.next_process_at:%Y-%m-%d %H:%M:%S} UTC)" if info.next_process_at else ""
    click.echo(f"enqueued {info.id} to {info.queue}: {info.state.value}{when}")


for group in (stats, queue, task, server):
    main.add_command(group)


main.add_command(dash)

if __name__ == "__main__":
    main()
