"""``asynqpy process ls|inspect|start|call|repair|rm``: durable processes (docs/processes.md)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from asynqpy.core.processes.model import Process

from .common import (
    UserError,
    ago,
    clip,
    console,
    echo,
    emit_json,
    inspector,
    json_option,
    json_text,
    payload_text,
    redis_url_option,
    user_errors,
)

if TYPE_CHECKING:
    from asynqpy.inspector import Inspector

queue_option = click.option("--queue", "-q", default="default", show_default=True, help="The process's queue.")
args_option = click.option("--args", "args", default=None, help="The input's arguments, as JSON.")
timeout_option = click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.001),
                              help="Seconds to wait for the processor's response.")


@click.group()
def process() -> None:
    """List, inspect, start, call, repair and remove durable processes."""


def _args(text: str | None) -> Any:
    try:
        return json.loads(text) if text is not None else None
    except json.JSONDecodeError as exc:
        raise UserError(f"--args is not valid JSON: {exc}") from None


def _status(p: Process) -> str:
    c = {"running": "green", "error": "red", "starting": "yellow"}.get(p.status, "")
    text = f"[{c}]{escape(p.status)}[/{c}]" if c else escape(p.status)
    if p.failing:
        text += f" [red](failing: {escape(clip(p.failing, False, 60))}, {p.failing_attempts} attempt(s))[/red]"
    return text


@process.command("ls")
@click.option("--queue", "-q", default=None, help="Only this queue's processes (default: every queue's).")
@click.option("--start", default=0, show_default=True, type=click.IntRange(0), help="Rank to start from.")
@click.option("--count", "-n", default=100, show_default=True, type=click.IntRange(1, 1000), help="Most to list.")
@click.option("--status", "-s", type=click.Choice(["starting", "running", "error"]), default=None,
              help="Only the processes in this status (reads every record of the queue).")
@json_option
@redis_url_option
@user_errors
def ls(queue: str | None, start: int, count: int, status: str | None, as_json: bool, redis_url: str) -> None:
    """List processes (of every queue unless -q), the most recently changed first."""
    with inspector(redis_url) as insp:
        total, procs = _page(insp, queue, start, count, status)
    if as_json:
        emit_json({"total": total, "processes": procs})
        return
    console().print(_processes_table(total, procs, queue, status))


def _page(insp: Inspector, queue: str | None, start: int, count: int,
          status: str | None) -> tuple[int, list[Process]]:
    """How many processes there are and the page asked for: a queue's, or each queue's first
    start+count merged, the most recently changed first (the page of them all)."""
    if queue is not None:
        return insp.processes(queue, start, count, status)
    listed = [insp.processes(q, 0, start + count, status) for q in insp.queues()]
    total = sum(n for n, _ in listed)
    procs = sorted((p for _, ps in listed for p in ps),
                   key=lambda p: p.updated.timestamp() if p.updated else 0.0, reverse=True)
    return total, procs[start:start + count]


def _processes_table(total: int, procs: list[Process], queue: str | None, status: str | None) -> Table:
    """The page as a table titled with the count; a queue column when every queue is listed."""
    now = datetime.now(timezone.utc)
    what = f"process(es) in {status}" if status == "error" else f"{status} process(es)" if status else "process(es)"
    table = Table(title=f"{total} {what} in " + (f"queue {queue}" if queue else "every queue"), title_justify="left")
    for col in ("id", *([] if queue else ["queue"]), "type", "status", "events", "updated", "timer", "state"):
        table.add_column(col)
    for p in procs:
        table.add_row(clip(p.id, False, 40), *([] if queue else [p.queue]), p.type, Text.from_markup(_status(p)),
                      str(p.events),
                      ago(p.updated, now), ago(p.timer, now) if p.timer else "-", payload_text(p.state))
    return table


@process.command()
@click.argument("process_id")
@queue_option
@click.option("--first", default=0, show_default=True, type=click.IntRange(0),
              help="First event to show (1-based); 0: the latest --count.")
@click.option("--count", "-n", default=20, show_default=True, type=click.IntRange(0, 1000), help="Most events.")
@json_option
@redis_url_option
@user_errors
def inspect(process_id: str, queue: str, first: int, count: int, as_json: bool, redis_url: str) -> None:
    """Show a process: status, state, timer and a page of its history."""
    with inspector(redis_url) as insp:
        p = insp.process(queue, process_id, first, count)
    if as_json:
        emit_json(p)
        return
    now = datetime.now(timezone.utc)
    out = console()
    kept = f" (the oldest kept: #{p.first_event})" if p.first_event > 1 else ""
    out.print(f"process [bold]{escape(p.id)}[/bold] ({escape(p.type)}, queue {escape(p.queue)}): {_status(p)}, "
              f"{p.events} event(s){kept}", markup=True)
    out.print(f"  created {ago(p.created, now)}, updated {ago(p.updated, now)}")
    if p.tenant:
        out.print(f"  tenant: {escape(p.tenant)}", markup=True)
    if p.timer:
        out.print(f"  timer: {ago(p.timer, now)} (input {p.timer_id})")
    if p.failing:
        out.print(f"  input {escape(p.failing_input)} failed {p.failing_attempts} time(s) and waits for a retry: "
                  f"{escape(p.failing)}", markup=True)
        out.print("  the inputs sent after it wait behind it; remove it now: asynqpy process rm --now "
                  + process_id + (f" -q {queue}" if queue != "default" else ""))
    if p.status == "error":
        out.print(f"  broken by input {p.broken_by}: {p.error}")
        out.print("  repair it: asynqpy process repair " + process_id + (f" -q {queue}" if queue != "default" else ""))
    out.print(f"  state: {payload_text(p.state, full=True)}")
    table = Table(title="history", title_justify="left")
    for col in ("#", "at", "kind", "input", "event"):
        table.add_column(col)
    for e in p.history:
        table.add_row(str(e.id), e.at.isoformat(timespec="milliseconds"), e.kind, e.input, payload_text(e.data))
    out.print(table)


@process.command()
@click.argument("process_type")
@click.argument("process_id")
@queue_option
@args_option
@click.option("--tenant", default=None, help="The tenant the process belongs to: its inputs and timers take turns "
              "as that tenant's tasks (docs/tenants.md).")
@redis_url_option
@user_errors
def start(process_type: str, process_id: str, queue: str, args: str | None, tenant: str | None,
          redis_url: str) -> None:
    """Start process PROCESS_ID of PROCESS_TYPE (idempotent: nothing happens if it exists)."""
    from asynqpy import Client

    with Client(redis_url) as c:
        started = c.start_process(process_type, process_id, _args(args), queue=queue,
                                  **({"tenant": tenant} if tenant is not None else {}))
    echo(f"started process {process_id}" if started else f"process {process_id} exists: nothing done")


def _send(kind: str, process_id: str, queue: str, args: str | None, timeout: float, redis_url: str) -> None:
    from asynqpy import Client

    with Client(redis_url) as c:
        fn = c.call_process if kind == "call" else c.repair_process
        try:
            got = fn(process_id, _args(args), timeout=timeout, queue=queue)
        except TimeoutError:
            raise UserError(f"no response within {timeout:g}s (the input is queued and will still run)") from None
    click.echo(json_text(got))


@process.command()
@click.argument("process_id")
@queue_option
@args_option
@timeout_option
@redis_url_option
@user_errors
def call(process_id: str, queue: str, args: str | None, timeout: float, redis_url: str) -> None:
    """Call a running process and print its processor's response (JSON)."""
    _send("call", process_id, queue, args, timeout, redis_url)


@process.command()
@click.argument("process_id")
@queue_option
@args_option
@timeout_option
@redis_url_option
@user_errors
def repair(process_id: str, queue: str, args: str | None, timeout: float, redis_url: str) -> None:
    """Repair a process in error: its processor gets a repair input (with --args) and decides;
    print its response (JSON)."""
    _send("repair", process_id, queue, args, timeout, redis_url)


@process.command()
@click.argument("process_id")
@queue_option
@click.option("--now", is_flag=True, help="First delete the input it waits behind if that input waits for a retry "
                                          "(an init that keeps failing), so the removal is not held up by it.")
@redis_url_option
@user_errors
def rm(process_id: str, queue: str, now: bool, redis_url: str) -> None:
    """Remove a process (record, history, timer) once the inputs queued before it ran (a worker
    of its queue does it; this only queues the removal)."""
    from asynqpy import Client

    with Client(redis_url) as c:
        if not c.remove_process(process_id, queue=queue, timeout=0, now=now):
            raise UserError(f"no process {process_id!r} in queue {queue!r}")
    echo(f"removal of process {process_id} queued")
