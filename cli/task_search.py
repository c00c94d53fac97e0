"""``asynqpy task search``: find a queue's tasks by what they hold, then act on them."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from asynqpy import TaskInfo
from asynqpy.core.inspector.search import ACTIONS, parse_payload_condition

from .common import (
    UserError,
    When,
    ask,
    clip,
    console,
    echo,
    emit_json,
    encryption_keys_option,
    encryption_ring,
    full_option,
    inspector,
    json_option,
    payload_text,
    redis_url_option,
    show,
    user_errors,
)


def _pairs(name: str, items: tuple[str, ...], split: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if split:
            path, value = parse_payload_condition(item)
        else:
            path, eq, value = item.partition("=")
            if not eq or not path:
                raise UserError(f"{name} takes NAME=VALUE, got {item!r}")
        out[path] = value
    return out


def _table(tasks: list[TaskInfo], full: bool) -> Table:
    t = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("id", "state", "type", "tenant", "payload", "last error"):
        t.add_column(name, no_wrap=not full or name in ("id", "state"), overflow="fold" if full else "ellipsis")
    for x in tasks:
        t.add_row(x.id, x.state.value, clip(x.type, full, 16), clip(x.tenant or "-", full, 12),
                  payload_text(x.payload, full, 28), clip(x.last_error or "-", full, 20))
    return t


@click.command("search")
@click.option("--queue", "-q", required=True, help="The queue to search.")
@click.option("--state", "-s", "states", multiple=True, help="A state the tasks are in (repeat for several).")
@click.option("--type", "-t", "task_type", default=None, help="The tasks' type.")
@click.option("--tenant", default=None, help="The tasks' tenant.")
@click.option("--payload", "-p", "payload", multiple=True, metavar="PATH[=VALUE]",
              help="A payload condition: a dotted path and the value there (JSON if it reads as JSON, "
                   "else the text itself: n=42 is a number, n='\"42\"' the text); a path alone: present. "
                   "Repeat for several (all must hold).")
@click.option("--text", default=None, help="A substring of the payload.")
@click.option("--error", default=None, help="A substring of the last error.")
@click.option("--header", "headers", multiple=True, metavar="NAME=VALUE", help="A header the tasks carry.")
@click.option("--since", type=When(), default=None, help="Enqueued at or after (Unix seconds or ISO 8601).")
@click.option("--until", type=When(), default=None, help="Enqueued before (Unix seconds or ISO 8601).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Most tasks to list (without --then).")
@click.option("--then", "action", type=click.Choice(ACTIONS), default=None,
              help="Act on every match: retry (a retry or archived task runs now), run, archive, delete, cancel.")
@click.option("--yes", is_flag=True, help="With --then: do not ask first.")
@click.option("--dry-run", is_flag=True, help="Only count the matches.")
@json_option
@full_option
@encryption_keys_option
@redis_url_option
@user_errors
def search(queue: str, states: tuple[str, ...], task_type: str | None, tenant: str | None, payload: tuple[str, ...],
           text: str | None, error: str | None, headers: tuple[str, ...], since: Any, until: Any, limit: int,
           action: str | None, yes: bool, dry_run: bool, as_json: bool, full: bool, encryption_keys_file: str | None,
           redis_url: str) -> None:
    """Find a queue's tasks by state, type, tenant, payload, error, header or enqueue time (a bounded
    scan in Redis, a few milliseconds a step), list them, count them (--dry-run) or act on every
    match (--then ACTION: shows the count and asks first). Encrypted payloads are searched with
    --encryption-keys (decrypted here, in bounded batches); without keys no payload condition meets them."""
    conditions: dict[str, Any] = {
        "state": list(states) or None, "type": task_type, "tenant": tenant,
        "payload": _pairs("--payload", payload, True) or None, "text": text, "error": error,
        "header": _pairs("--header", headers, False) or None, "since": since, "until": until}
    with inspector(redis_url, encryption=encryption_ring(encryption_keys_file)) as insp:
        if dry_run or action:
            _count_then_act(insp, queue, conditions, action, yes, dry_run, as_json)
            return
        tasks = list(insp.search(queue, limit=limit, **conditions))
    if as_json:
        emit_json(tasks)
    elif not tasks:
        echo(f"no task matches in queue {queue}")
    else:
        show(console(), _table(tasks, full))
        echo(f"{len(tasks):,} task(s){' (the first --limit)' if len(tasks) >= limit else ''}")


def _count_then_act(insp: Any, queue: str, conditions: dict[str, Any], action: str | None, yes: bool,
                    dry_run: bool, as_json: bool) -> None:
    """--dry-run: the count; --then: the count, the question (unless --yes), the action, its report."""
    n = insp.search_count(queue, **conditions)
    if dry_run or not n or not action:
        emit_json({"matches": n}) if as_json else echo(f"{n:,} task(s) match in queue {queue}")
        return
    if not yes:
        ask(f"{action} {n:,} matching task(s) in queue {queue}?")
    rep = insp.search_act(queue, action, **conditions)
    if as_json:
        emit_json({"action": rep.action, "done": rep.done, "skipped": rep.skipped, "gone": rep.gone,
                   "refused": rep.refused})
        return
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(rep.skipped.items())) or "none"
    echo(f"{rep.action}: {rep.done:,} done; skipped (state) {skipped}; gone {rep.gone}; refused {len(rep.refused)}")
    for id, why in list(rep.refused.items())[:20]:
        echo(f"  {id}: {why}")
