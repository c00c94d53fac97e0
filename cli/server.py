"""``asynqpy server ls|stop|quiet|resume|scale``."""

from __future__ import annotations

from datetime import datetime, timezone

import click
from rich.table import Table
from rich.text import Text

from asynqpy.core.server.record import ServerInfo, WorkerInfo

from .common import (
    UserError,
    ago,
    console,
    echo,
    emit_json,
    inspector,
    json_option,
    redis_url_option,
    show,
    user_errors,
)


@click.group()
def server() -> None:
    """List live servers (workers); stop, quiet, resume or resize one from any machine."""


@server.command("ls")
@json_option
@redis_url_option
@user_errors
def ls(as_json: bool, redis_url: str) -> None:
    """List live servers: name, the asynqpy release each runs, busy/concurrency, queues (weights), when
    started. Busy is
    as of each server's last heartbeat (up to heartbeat_interval, 5 s by default, behind:
    docs/workers.md); a queue's active tasks now: `asynqpy stats`."""
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
    show(out, _servers_table(servers, now))
    running = [(s, w) for s in servers for w in s.active]
    if running:
        out.print()
        show(out, _running_table([w for _, w in running], now))


STATUS_STYLES = {"quiet": "yellow", "stopping": "red"}
"""How ``server ls`` colours a server's status (running: plain)."""


def _servers_table(servers: list[ServerInfo], now: datetime) -> Table:
    """One row a server: id, name, version (a column only while a deploy uses them:
    docs/deploy.md), the asynqpy release it runs, status, busy/concurrency, queues (weights) and when it started."""
    t = Table(box=None, pad_edge=False, header_style="bold")
    t.add_column("id", no_wrap=True)
    t.add_column("name", no_wrap=True, max_width=16, overflow="ellipsis")
    versions = any(s.version for s in servers)
    if versions:
        t.add_column("version", no_wrap=True)
    t.add_column("asynqpy", no_wrap=True)  # the release it runs ('?': one older than the server record's field)
    t.add_column("status", no_wrap=True)
    t.add_column("busy", justify="right", no_wrap=True)
    t.add_column("queues")
    t.add_column("started", no_wrap=True)
    for s in servers:
        queues = ", ".join(f"{q}={w}" for q, w in s.queues.items()) + (" (strict)" if s.strict else "")
        status = Text(s.status, style=STATUS_STYLES[s.status]) if s.status in STATUS_STYLES else Text(s.status)
        t.add_row(s.id, s.name or "-", *([s.version or "-"] if versions else []), s.asynqpy_version or "?", status,
                  f"{len(s.active)}/{s.concurrency}", queues, ago(s.started, now))
    return t


def _running_table(running: list[WorkerInfo], now: datetime) -> Table:
    """The tasks the servers run now: id, queue, type, when started, deadline."""
    r = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("task", "queue", "type", "started", "deadline"):
        r.add_column(col, no_wrap=True, overflow="ellipsis", max_width=20 if col in ("queue", "type") else None)
    for w in running:
        r.add_row(w.task_id, w.queue, w.type, ago(w.started, now), ago(w.deadline, now))
    return r


def _control(action: str, server: str, timeout: float, redis_url: str, concurrency: int = 0) -> None:
    from asynqpy.core.model.errors import ServerNotFoundError

    with inspector(redis_url) as insp:
        ids = [s.id for s in insp.servers() if server in (s.id, s.name)]
        if len(ids) > 1:
            raise UserError(f"{len(ids)} live servers are named {server!r}: give one's id ({', '.join(ids)})")
        try:
            target = ids[0] if ids else server
            if action == "scale":
                got = insp.scale_server(target, concurrency, timeout)
            else:
                fn = {"stop": insp.stop_server, "quiet": insp.quiet_server, "resume": insp.resume_server}[action]
                got = fn(target, timeout)
        except ServerNotFoundError:
            raise UserError(f"no live server {server!r} (see asynqpy server ls)") from None
        except TimeoutError as exc:
            raise UserError(str(exc)) from None
    echo(f"server {ids[0] if ids else server}: {got}")


timeout_option = click.option("--timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
                              help="Seconds to wait for the server's acknowledgement.")


@server.command()
@click.argument("server_id")
@timeout_option
@redis_url_option
@user_errors
def stop(server_id: str, timeout: float, redis_url: str) -> None:
    """Stop server SERVER_ID (its id or --name) gracefully, as SIGTERM does: running tasks finish
    within its shutdown timeout or go back to their queues."""
    _control("stop", server_id, timeout, redis_url)


@server.command()
@click.argument("server_id")
@timeout_option
@redis_url_option
@user_errors
def quiet(server_id: str, timeout: float, redis_url: str) -> None:
    """Make server SERVER_ID take no new task; its running tasks finish (before a deploy)."""
    _control("quiet", server_id, timeout, redis_url)


@server.command()
@click.argument("server_id")
@timeout_option
@redis_url_option
@user_errors
def resume(server_id: str, timeout: float, redis_url: str) -> None:
    """Make a quiet server SERVER_ID take tasks again."""
    _control("resume", server_id, timeout, redis_url)


@server.command()
@click.argument("server_id")
@click.option("--concurrency", required=True, type=int, help="Handlers the server runs at once from now on (1-100000).")
@timeout_option
@redis_url_option
@user_errors
def scale(server_id: str, concurrency: int, timeout: float, redis_url: str) -> None:
    """Resize running server SERVER_ID: up to --concurrency handlers at once from now on (a
    smaller number takes effect as its running tasks finish; none is stopped). Not kept across a
    restart."""
    _control("scale", server_id, timeout, redis_url, concurrency)
