"""``asynqpy stats``: every queue at a glance, today's totals and the Redis server."""

from __future__ import annotations

from typing import Any

import click
from redis.exceptions import RedisError
from rich.table import Table

from asynqpy import QueueInfo

from .common import (
    console,
    duration,
    emit_json,
    fit,
    inspector,
    json_option,
    latency,
    redis_url_option,
    show,
    size,
    user_errors,
    utc,
)

COLUMNS = ("pending", "active", "scheduled", "retry", "archived", "completed", "latency")
GAP = 1
"""Spaces between two columns (the table's padding)."""


def queue_table(rows: list[QueueInfo], width: int = 80, memory: bool = False) -> Table:
    """Queues with their counts per state and latency (and with ``memory`` their approximate
    memory), in ``width`` columns: a long queue name is cut (with an ellipsis, keeping "(paused)"),
    never the headers or the numbers."""
    columns = COLUMNS + ("memory",) if memory else COLUMNS
    cells = [[f"{n:,}" for n in (q.pending, q.active, q.scheduled, q.retry, q.archived, q.completed)]
             + [latency(q.pending, q.latency)] + ([size(q.memory_bytes)] if memory else []) for q in rows]
    widths = [max([len(col)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    room = max(8, width - sum(w + GAP for w in widths))
    table = Table(box=None, pad_edge=False, padding=(0, GAP, 0, 0), header_style="bold")
    table.add_column("queue", no_wrap=True)
    for col, w in zip(columns, widths):
        table.add_column(col, justify="right", no_wrap=True, min_width=w)
    for q, row in zip(rows, cells):
        suffix = " (paused)" if q.paused else ""
        table.add_row(fit(q.queue, room - len(suffix)) + suffix, *row)
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
@click.option("--memory", is_flag=True,
              help="Also read each queue's approximate memory (a sampled MEMORY USAGE of its keys): a memory "
                   "column, and memory_bytes in --json (null without it).")
@json_option
@redis_url_option
@user_errors
def stats(memory: bool, as_json: bool, redis_url: str) -> None:
    """Every queue's tasks per state and latency, today's processed and failed counts, and the
    Redis server's version and memory."""
    with inspector(redis_url) as insp:
        rows = insp.all_queue_info(memory=memory)
        redis_line = None if as_json else _redis_line(insp.redis)
    if as_json:
        emit_json(rows)
        return
    out = console()
    if not rows:
        out.print("no queues yet")
        return
    out.print(f"[bold]Queues[/bold] ({utc(rows[0].timestamp)})")
    show(out, queue_table(rows, out.width, memory))
    processed, failed = sum(q.processed_today for q in rows), sum(q.failed_today for q in rows)
    split = ""
    if processed:
        split = f" ({processed - failed:,} succeeded, {failed:,} failed: {100 * failed / processed:.1f}%)"
    out.print(f"\nToday (UTC): processed {processed:,}{split}")
    if redis_line:
        out.print(redis_line)
