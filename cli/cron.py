"""``asynqpy cron ls|add|rm|pause|resume|run-now|history`` and ``asynqpy scheduler``."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import click

from .common import (
    UserError,
    ago,
    console,
    echo,
    emit_json,
    full_option,
    inspector,
    json_option,
    redis_url_option,
    show,
    signing_key_option,
    signing_keys,
    user_errors,
    utc,
)

if TYPE_CHECKING:  # rich loads with the commands that use it
    from rich.table import Table

    from asynqpy.core.cron.entries import EntryInfo


@click.group()
def cron() -> None:
    """List, add, remove, pause, resume and run scheduler entries (periodic tasks)."""


def _entry_json(i: Any) -> dict[str, Any]:
    e = i.entry
    return {"name": e.name, "queue": e.queue, "type": e.task_type, "payload": e.payload, "cron": e.cron,
            "every": e.every, "tz": e.tz, "missed": e.missed, "options": dict(e.options), "owner": e.owner or None,
            "paused": i.paused,
            "last_tick": i.last_tick, "next_tick": i.next_tick, "last_task_id": i.last_task_id,
            "signature": i.signature,
            "history": [{"tick": f.tick, "task_id": f.task_id, "enqueued_at": f.enqueued_at, "late_ms": f.late_ms}
                        for f in i.history]}


def _next_tick(i: Any, mixed: bool, when: str, short: bool = False) -> str:
    """The next-tick cell: an entry a keyed scheduler does not fire says so (``short``: without the
    reason, which --full and --json give); an unsigned one among signed ones is marked."""
    if i.signature.startswith("bad signature"):
        return "not fired: bad signature" if short else f"not fired: {i.signature}"
    return f"unsigned ({when})" if mixed and i.signature == "unsigned" else when


@cron.command("ls")
@click.option("-q", "--queue", default=None, help="Only this queue's entries.")
@json_option
@full_option
@signing_key_option
@redis_url_option
@user_errors
def ls(queue: str | None, as_json: bool, full: bool, signing_key_file: str | None, redis_url: str) -> None:
    """List scheduler entries: schedule, task type, next tick (UTC), one line each (--full: every
    cell whole, with the last tick and task; --json: everything, with payload, options, signature
    and recent history). With --signing-key-file, an entry whose signature does not verify shows
    "not fired: ..." (a keyed scheduler skips it); without, an unsigned entry among signed ones
    shows "unsigned"."""
    with inspector(redis_url, signing_keys(signing_key_file)) as insp:
        infos = insp.scheduler_entries(queue)
    if as_json:
        emit_json([_entry_json(i) for i in infos])
        return
    if not infos:
        echo("no scheduler entries")
        return
    out = console()
    mixed = any(i.signature == "signed" for i in infos)
    if full:  # each cell whole, on one line however long (the terminal wraps it)
        show(console(width=max(out.width, 1000)), _full_table(infos, mixed))
        return
    show(out, _lines_table(infos, mixed, out.width))


def _full_table(infos: list[EntryInfo], mixed: bool) -> Table:
    """``cron ls --full``: every cell whole, with the last tick and the last task."""
    from rich.table import Table

    now = datetime.now(timezone.utc)
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("name", "queue", "schedule", "task type", "next tick (UTC)", "last tick", "last task"):
        t.add_column(col, no_wrap=True)
    for i in infos:
        e = i.entry
        nxt = _next_tick(i, mixed, "paused" if i.paused else utc(i.next_tick).removesuffix(" UTC"))
        t.add_row(e.name, e.queue, e.spec(), e.task_type, nxt, ago(i.last_tick, now), i.last_task_id or "-")
    return t


LINE_HEADS = ("name", "queue", "schedule", "task type", "next (UTC)")
LINE_CAPS = (22, 14, 18, 10**6, 24)
"""The most each column of ``cron ls`` takes before the task type has its share."""
LINE_CUTS = (0, 2, 1, 3)
"""Still too wide: the columns cut, in this order (name, schedule, queue, then the type), down to
10 characters."""


def _lines_table(infos: list[EntryInfo], mixed: bool, width: int) -> Table:
    """``cron ls``: one line per entry in the terminal's ``width`` (80 columns if not a
    terminal): long cells cut with …"""
    from rich.table import Table

    rows = [[i.entry.name, i.entry.queue, i.entry.spec(), i.entry.task_type,
             _next_tick(i, mixed, "paused" if i.paused else utc(i.next_tick)[5:16], short=True)]  # month-day h:m
            for i in infos]
    t = Table(box=None, pad_edge=False, header_style="bold")
    for h, w in zip(LINE_HEADS, _widths(rows, width)):
        t.add_column(h, no_wrap=True, overflow="ellipsis", min_width=w, max_width=w)
    for r in rows:
        t.add_row(*r)
    return t


def _widths(rows: list[list[str]], width: int) -> list[int]:
    """Each column's width: its natural width up to its cap, the task type the room left (at
    least 16), then the columns of :data:`LINE_CUTS` cut while the line is too wide."""
    natural = [max(len(h), *(len(r[c]) for r in rows)) for c, h in enumerate(LINE_HEADS)]
    widths = [min(n, cap) for n, cap in zip(natural, LINE_CAPS)]
    room = width - 2 * (len(LINE_HEADS) - 1)
    widths[3] = max(min(16, natural[3]), room - sum(widths) + widths[3])
    for c in LINE_CUTS:
        over = sum(widths) - room
        if over > 0:
            widths[c] = max(min(10, natural[c]), widths[c] - over)
    return widths


@cron.command()
@click.argument("name")
@click.argument("task_type")
@click.option("--cron", "cron_expr", default=None,
              help="Cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds "
                   "first. Needs pip install '.[cron]' in asynqpy's repository.")
@click.option("--every", type=click.FloatRange(min=1), default=None, help="Or: every N seconds (aligned to the epoch).")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of the cron expression.")
@click.option("-q", "--queue", default="default", show_default=True, help="Queue the tasks go to.")
@click.option("--payload", default=None, help="The tasks' payload, as JSON.")
@click.option("--missed", type=click.Choice(["skip", "last"]), default="skip", show_default=True,
              help="Ticks missed while no scheduler ran: skip them, or run the last one once.")
@click.option("--max-retry", type=click.IntRange(min=0), default=None, help="The tasks' max_retry.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None, help="The tasks' timeout, seconds.")
@signing_key_option
@redis_url_option
@user_errors
def add(name: str, task_type: str, cron_expr: str | None, every: float | None, tz: str, queue: str,
        payload: str | None, missed: str, max_retry: int | None, timeout: float | None, signing_key_file: str | None,
        redis_url: str) -> None:
    """Add (or replace) entry NAME enqueuing TASK_TYPE on each tick of --cron or --every (signed
    with --signing-key-file: schedulers with signing keys fire only signed entries)."""
    if (cron_expr is None) == (every is None):
        raise UserError("give --cron EXPR or --every SECONDS (one of them)")
    try:
        data = json.loads(payload) if payload is not None else None
    except json.JSONDecodeError as exc:
        raise UserError(f"--payload is not JSON: {exc}") from None
    options: dict[str, Any] = {}
    if max_retry is not None:
        options["max_retry"] = max_retry
    if timeout is not None:
        options["timeout"] = timeout or None
    with inspector(redis_url, signing_keys(signing_key_file)) as insp:
        e = insp.cron_add(name, task_type, data, cron=cron_expr, every=every, tz=tz, queue=queue, missed=missed,
                          **options)
        (info,) = [i for i in insp.scheduler_entries(queue) if i.name == name]
    echo(f"entry {e.name} ({e.spec()}) enqueues {e.task_type} to {e.queue}; next tick {utc(info.next_tick)}")


def _named(verb: str, help: str) -> Callable[[Callable[..., None]], click.Command]:
    """A command acting on entries NAMES, each in -q QUEUE or, without it, in whichever queue has
    it (as ``task cancel`` finds its tasks)."""
    def decorate(fn: Callable[..., None]) -> click.Command:
        fn = user_errors(fn)
        fn = redis_url_option(fn)
        fn = click.option("-q", "--queue", default=None,
                          help="The entries' queue (default: look in every queue).")(fn)
        fn = click.argument("names", nargs=-1, required=True)(fn)
        return cron.command(verb, help=help)(fn)
    return decorate


def _queues(insp: Any, names: tuple[str, ...], queue: str | None) -> list[tuple[str, str]]:
    """(name, queue) of each entry, every one found before any is acted on."""
    if queue is not None:
        return [(n, queue) for n in names]
    return [(n, _find(insp, n, None).queue) for n in names]


@_named("rm", "Remove entries NAMES (the tasks they enqueued stay).")
def rm(names: tuple[str, ...], queue: str | None, redis_url: str) -> None:
    with inspector(redis_url) as insp:
        for n, q in _queues(insp, names, queue):
            insp.cron_remove(n, q)
            echo(f"removed entry {n}" + ("" if queue else f" of queue {q}"))


@_named("pause", "Pause entries NAMES: no tick fires until resumed.")
def pause(names: tuple[str, ...], queue: str | None, redis_url: str) -> None:
    with inspector(redis_url) as insp:
        for n, q in _queues(insp, names, queue):
            insp.cron_pause(n, q)
            echo(f"paused entry {n}" + ("" if queue else f" of queue {q}"))


@_named("resume", "Resume entries NAMES from their next tick.")
def resume(names: tuple[str, ...], queue: str | None, redis_url: str) -> None:
    with inspector(redis_url) as insp:
        for n, q in _queues(insp, names, queue):
            insp.cron_resume(n, q)
            echo(f"resumed entry {n}" + ("" if queue else f" of queue {q}"))


@cron.command("run-now")
@click.argument("names", nargs=-1, required=True)
@click.option("-q", "--queue", default=None, help="The entries' queue (default: look in every queue).")
@signing_key_option
@redis_url_option
@user_errors
def run_now(names: tuple[str, ...], queue: str | None, signing_key_file: str | None, redis_url: str) -> None:
    """Enqueue the task of entries NAMES now, outside their schedule (with --signing-key-file, the
    task is signed, and an entry whose signature does not verify is refused)."""
    with inspector(redis_url, signing_keys(signing_key_file)) as insp:
        for n, q in _queues(insp, names, queue):
            echo(f"entry {n}: enqueued {insp.cron_run_now(n, q)} to {q}")


@cron.command()
@click.argument("name")
@click.option("-q", "--queue", default=None, help="The entry's queue (default: look in every queue).")
@json_option
@redis_url_option
@user_errors
def history(name: str, queue: str | None, as_json: bool, redis_url: str) -> None:
    """The last enqueues of entry NAME, newest first: tick, how late (ms), task (--json: with
    when each was enqueued)."""
    from rich.table import Table

    with inspector(redis_url) as insp:
        found = _find(insp, name, queue)
    fired = found.history
    if as_json:
        emit_json([{"tick": f.tick, "task_id": f.task_id, "enqueued_at": f.enqueued_at, "late_ms": f.late_ms}
                   for f in fired])
        return
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("tick (UTC)", "late ms", "task"):  # one line each in 80 columns for entry names up to 30
        t.add_column(col, justify="right" if col == "late ms" else "left", no_wrap=col != "task",
                     overflow="fold")  # characters (--json also gives when each was enqueued)
    for f in fired:
        t.add_row(utc(f.tick).removesuffix(" UTC") if f.tick else "(run now)", str(f.late_ms), f.task_id)
    show(console(), t)


def _find(insp: Any, name: str, queue: str | None) -> Any:
    """Entry ``name`` (its EntryInfo) of ``queue``, or of whichever queue has it when ``queue`` is
    None (UserError naming the queues when several have one)."""
    found = [i for i in insp.scheduler_entries(queue) if i.name == name]
    if not found:
        raise UserError(f"no scheduler entry {name!r} " + (f"in queue {queue!r}" if queue else "in any queue"))
    if len(found) > 1:
        raise UserError(f"scheduler entries named {name!r} are in queues {', '.join(i.queue for i in found)}: "
                        "give -q QUEUE")
    return found[0]


@click.command()
@click.option("--refresh", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between two reloads of the entries stored in Redis.")
@signing_key_option
@redis_url_option
@user_errors
def scheduler(refresh: float, signing_key_file: str | None, redis_url: str) -> None:
    """Run a scheduler: enqueue every stored entry's task on its ticks, until SIGTERM or Ctrl-C.
    Run as many as you like: each tick is enqueued once."""
    from asynqpy.cron import Scheduler

    Scheduler(redis_url, refresh=refresh, signing_key=signing_keys(signing_key_file)).run()
