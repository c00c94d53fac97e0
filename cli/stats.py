"""``asynqpy stats``: every queue at a glance, today's totals and the Redis server."""

from __future__ import annotations

from typing import Any

import click
from redis.exceptions import RedisError
from rich.table import Table

from asynqpy import QueueInfo

from .common import console, duration, emit_json, inspector, json_option, redis_url_option, size, user_errors, utc


def queue_table(rows: list[QueueInfo]) -> Table:
    """Queues with their counts per state and latency (fits 80 columns)."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("queue", no_wrap=True, overflow="ellipsis", max_width=24)
    for col in ("pending", "active", "scheduled", "retry", "archived", "completed", "latency"):
        table.add_column(col, justify="right", no_wrap=True)
    for q in rows:
        name = f"{q.queue} (paused)" if q.paused else q.queue
        table.add_row(name, *(f"{n:,}" for n in (q.pending, q.active, q.scheduled, q.retry, q.archived,
                                                 q.completed)), duration(q.latency))
    return table


def _redis_line(redis: Any) -> str | None:
    try:
        info = redis.info()
    except RedisError:
        return None  # INFO may be disabled (managed Redis): not worth failing for
    if not isinstance(info, dict) or "redis_version" not in info:
        return None
    return (f"Redis {info['redis_version']} · memory {size(info.get('used_memory'))} · "
            f"{info.get('connected_clients', '?')} clients · up {duration(float(info.get('uptime_in_seconds', 0)))}")


@click.command()
@json_option
@redis_url_option
@user_errors
def stats(as_json: bool, redis_url: str) -> None:
    """Every queue's tasks per state and latency, today's processed and failed counts, and the
    Redis server's version and memory."""
    with inspector(redis_url) as insp:
        rows = insp.all_queue_info()
        redis_line = None if as_json else _redis_line(insp.redis)
    if as_json:
        emit_json(rows)
        return
    out = console()
    if not rows:
        out.print("no queues yet")
        return
    out.print(f"[bold]Queues[/bold] ({utc(rows[0].timestamp)})")
    out.print(queue_table(rows))
    processed, failed = sum(q.processed_today for q in rows), sum(q.failed_today for q in rows)
    rate = f" ({100 * failed / processed:.1f}% failed)" if processed else ""
    out.print(f"\nToday (UTC): processed {processed:,}, failed {failed:,}{rate}")
    if redis_line:
        out.print(redis_line)
