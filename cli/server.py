"""``asynqpy server ls``."""

from __future__ import annotations

from datetime import datetime, timezone

import click
from rich.table import Table

from .common import (
    ago,
    console,
    emit_json,
    inspector,
    json_option,
    redis_url_option,
    show,
    user_errors,
)


@click.group()
def server() -> None:
    """List live servers (workers)."""


@server.command("ls")
@json_option
@redis_url_option
@user_errors
def ls(as_json: bool, redis_url: str) -> None:
    """List live servers: name, host, pid, busy/concurrency, queues (weights), when started. Running
    tasks are as of each server's last heartbeat."""
    with inspector(redis_url) as insp:
        servers = insp.servers()
    if as_json:
        emit_json(servers)
        return
    out = console()
    if not servers:
        out.print("no live servers")
        return
    now = datetime.now(timezone.utc)
    t = Table(box=None, pad_edge=False, header_style="bold")
    t.add_column("name", no_wrap=True, max_width=24, overflow="ellipsis")
    t.add_column("host", no_wrap=True, max_width=24, overflow="ellipsis")
    t.add_column("pid", justify="right", no_wrap=True)
    t.add_column("busy", justify="right", no_wrap=True)
    t.add_column("queues")
    t.add_column("started", no_wrap=True)
    for s in servers:
        queues = ", ".join(f"{q}={w}" for q, w in s.queues.items()) + (" (strict)" if s.strict else "")
        t.add_row(s.name or "-", s.host, str(s.pid), f"{len(s.active)}/{s.concurrency}", queues, ago(s.started, now))
    show(out, t)
    running = [(s, w) for s in servers for w in s.active]
    if running:
        out.print()
        r = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("task", "queue", "type", "started", "deadline"):
            r.add_column(col, no_wrap=True, overflow="ellipsis", max_width=20 if col in ("queue", "type") else None)
        for _, w in running:
            r.add_row(w.task_id, w.queue, w.type, ago(w.started, now), ago(w.deadline, now))
        show(out, r)
