"""``asynqpy stats``: every queue at a glance, today's totals and the Redis server."""

from __future__ import annotations

from typing import Any

import click
from redis.exceptions import RedisError
from rich.cells import cell_len
from rich.console import Console
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
    visible,
)

COLUMNS = ("pending", "active", "scheduled", "retry", "archived", "completed", "latency")
GAP = 1
"""Spaces between two columns (the table's padding)."""


PLAIN_ROWS = 50
"""Above this many queues, ``asynqpy stats`` writes the table's rows as plain text in the layout
rich gives them (rich lays a table out at about 1 ms a row: 10 s for 10 000 queues); the header
stays rich's."""


def _layout(rows: list[QueueInfo], width: int, memory: bool) -> tuple[tuple[str, ...], list[str], list[list[str]],
                                                                      list[int]]:
    """(columns after the queue's, each row's queue cell, each row's other cells, those columns'
    widths)."""
    columns = COLUMNS + ("memory",) if memory else COLUMNS
    cells = [[f"{n:,}" for n in (q.pending, q.active, q.scheduled, q.retry, q.archived, q.completed)]
             + [latency(q.pending, q.latency)] + ([size(q.memory_bytes)] if memory else []) for q in rows]
    widths = [max([len(col)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    room = max(8, width - sum(w + GAP for w in widths))
    names = []
    for q in rows:
        suffix = " (paused)" if q.paused else ""
        names.append(fit(q.queue, room - len(suffix)) + suffix)
    return columns, names, cells, widths


def queue_table(rows: list[QueueInfo], width: int = 80, memory: bool = False) -> Table:
    """Queues with their counts per state and latency (and with ``memory`` their approximate
    memory), in ``width`` columns: a long queue name is cut (with an ellipsis, keeping "(paused)"),
    never the headers or the numbers."""
    return _table(*_layout(rows, width, memory))


def _table(columns: tuple[str, ...], names: list[str], cells: list[list[str]], widths: list[int],
           queue_width: int | None = None) -> Table:
    table = Table(box=None, pad_edge=False, padding=(0, GAP, 0, 0), header_style="bold")
    table.add_column("queue", no_wrap=True, min_width=queue_width)
    for col, w in zip(columns, widths):
        table.add_column(col, justify="right", no_wrap=True, min_width=w)
    for name, row in zip(names, cells):
        table.add_row(name, *row)
    return table


def show_queue_table(out: Console, rows: list[QueueInfo], memory: bool = False) -> None:
    """Print :func:`queue_table`; above :data:`PLAIN_ROWS` queues its rows as plain text (the same
    characters: every column as wide as its widest cell, names left, numbers right, one space
    between), when the table fits the console's width (else rich lays it out)."""
    columns, names, cells, widths = _layout(rows, out.width, memory)
    queue_width = max([len("queue")] + [cell_len(n) for n in names])
    if len(rows) <= PLAIN_ROWS or queue_width + sum(w + GAP for w in widths) > out.width:
        show(out, queue_table(rows, out.width, memory))
        return
    show(out, _table(columns, [], [], widths, queue_width))  # the header, as rich styles it
    lines = []
    for name, row in zip(names, cells):
        name = visible(name)  # (a name written by hand into the queue set: cli/common visible)
        line = name + " " * (queue_width - cell_len(name) + GAP) + " ".join(c.rjust(w) for c, w in zip(row, widths))
        lines.append(line.rstrip() + "\n")
    out.file.write("".join(lines))
    out.file.flush()


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
    out.print(f"[bold]Queues[/bold] ({utc(rows[0].timestamp)})", markup=True)
    show_queue_table(out, rows, memory)
    processed, failed = sum(q.processed_today for q in rows), sum(q.failed_today for q in rows)
    split = ""
    if processed:
        split = f" ({processed - failed:,} succeeded, {failed:,} failed: {100 * failed / processed:.1f}%)"
    out.print(f"\nToday (UTC): processed {processed:,}{split}")
    if redis_line:
        out.print(redis_line)
