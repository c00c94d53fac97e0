"""``asynqpy durable ls|inspect|signal|cancel|resume|result``: durable runs (docs/durable.md "Operating runs")."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from asynqpy.core.durable.timeline import STATES, RunInfo, TimelineEntry

from .common import (
    UserError,
    ago,
    clip,
    console,
    echo,
    emit_json,
    encryption_ring,
    inspector,
    json_option,
    payload_text,
    redis_url_option,
    user_errors,
)

queue_option = click.option("--queue", "-q", default="default", show_default=True, help="The run's queue.")
timeout_option = click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.001),
                              help="Seconds to wait for the run to take it.")
_COLOURS = {"completed": "green", "failed": "red", "error": "red", "cancelled": "yellow", "retrying": "yellow",
            "timed out": "yellow", "consumed": "green", "done": "green"}


@click.group()
def durable() -> None:
    """List and inspect durable runs; signal, cancel and resume them; wait for one's result."""


def _coloured(state: str) -> Text:
    c = _COLOURS.get(state, "")
    return Text.from_markup(f"[{c}]{escape(state)}[/{c}]" if c else escape(state))


@durable.command("ls")
@queue_option
@click.option("--state", "-s", type=click.Choice(STATES), default=None, help="Only the runs in this state.")
@click.option("--function", "-f", default=None, help="Only the runs of this function (its name).")
@click.option("--start", default=0, show_default=True, type=click.IntRange(0), help="Rank to start from.")
@click.option("--count", "-n", default=100, show_default=True, type=click.IntRange(1, 1000), help="Most to list.")
@json_option
@redis_url_option
@user_errors
def ls(queue: str, state: str | None, function: str | None, start: int, count: int, as_json: bool,
       redis_url: str) -> None:
    """List a queue's runs, the most recently changed first (reads every process record of the queue)."""
    with inspector(redis_url) as insp:
        total, runs = insp.durable_runs(queue, state=state, function=function, start=start, count=count)
    if as_json:
        emit_json({"total": total, "runs": runs})
        return
    now = datetime.now(timezone.utc)
    what = " ".join(x for x in (state, f"run(s) of {function}" if function else "run(s)") if x)
    table = Table(title=f"{total} {what} in queue {queue}", title_justify="left")
    for col in ("id", "function", "state", "events", "updated", "wake", "result / error"):
        table.add_column(col)
    for r in runs:
        outcome = r.error or (payload_text(r.result) if r.state == "completed" else "")
        if r.failing:
            outcome = f"failing: {r.failing}"
        table.add_row(clip(r.id, False, 40), r.function, _coloured(r.state), str(r.events), ago(r.updated, now),
                      ago(r.wake, now) if r.wake else "-", clip(outcome, False, 60))
    console().print(table)


def _when(t: datetime | None) -> str:
    return t.isoformat(timespec="milliseconds") if t else "-"


def _what(e: TimelineEntry) -> str:
    """The entry's result, error, payload or wake, as one cell."""
    if e.error:
        return e.error
    if e.kind == "signal":
        return payload_text(e.value) + (f" (taken at #{e.by})" if e.by is not None else "")
    if e.kind in ("sleep", "wait") and e.status in ("sleeping", "waiting"):
        return f"until {_when(e.wake)}" if e.wake else "no timeout"
    if e.kind == "task":
        return f"{e.task_id} -> {payload_text(e.value)}" if e.status != "waiting" else e.task_id
    if e.status == "retrying":
        return f"next attempt {_when(e.wake)}"
    return payload_text(e.value) if e.value is not None else ""


@durable.command()
@click.argument("run_id")
@queue_option
@json_option
@redis_url_option
@user_errors
def inspect(run_id: str, queue: str, as_json: bool, redis_url: str) -> None:
    """Show a run and its timeline: steps (start, end, attempts, result or error), sleeps, waits,
    signals (and the position that took each), tasks."""
    with inspector(redis_url) as insp:
        r = insp.durable_run(queue, run_id)
    if as_json:
        emit_json(r)
        return
    _show(r)


def _show(r: RunInfo) -> None:
    now = datetime.now(timezone.utc)
    out = console()
    out.print(Text.assemble(f"run {r.id} ({r.function}, queue {r.queue}): ", _coloured(r.state),
                            f", {r.events} event(s)"))
    out.print(f"  created {ago(r.created, now)}, updated {ago(r.updated, now)}"
              + (f", wakes {ago(r.wake, now)}" if r.wake else ""))
    if r.tenant:
        out.print(f"  tenant: {escape(r.tenant)}", markup=True)
    if r.state == "completed":
        out.print(f"  result: {payload_text(r.result, full=True)}")
    if r.error:
        out.print(f"  error: {escape(r.error)}", markup=True)
    if r.failing:
        out.print(f"  its next input is failing: {escape(r.failing)}", markup=True)
    if r.state in ("failed", "error"):
        out.print(f"  fix the code, deploy, then: asynqpy durable resume {r.id}"
                  + (f" -q {r.queue}" if r.queue != "default" else ""))
    table = Table(title="timeline", title_justify="left")
    for col in ("#", "what", "name", "status", "started", "ended", "tries", "result / detail"):
        table.add_column(col)
    for e in r.timeline:
        table.add_row("" if e.position is None else str(e.position), e.kind, e.name, _coloured(e.status),
                      _when(e.started), _when(e.ended), str(e.attempts) if e.attempts else "",
                      clip(_what(e), False, 70))
    out.print(table)


def _payload(text: str | None) -> Any:
    try:
        return json.loads(text) if text is not None else None
    except json.JSONDecodeError as exc:
        raise UserError(f"--payload is not valid JSON: {exc}") from None


@durable.command()
@click.argument("run_id")
@click.argument("name")
@click.option("--payload", "-p", default=None, help="The signal's payload, as JSON.")
@click.option("--idempotency-key", default=None, help="A repeat with the same key is delivered once.")
@queue_option
@timeout_option
@redis_url_option
@user_errors
def signal(run_id: str, name: str, payload: str | None, idempotency_key: str | None, queue: str, timeout: float,
           redis_url: str) -> None:
    """Send signal NAME to a run (kept until a wait takes it)."""
    from asynqpy import Client

    value = _payload(payload)
    with Client(redis_url) as c:
        if not _timed(lambda: c.signal(run_id, name, value, queue=queue, timeout=timeout,
                                       idempotency_key=idempotency_key), timeout):
            raise UserError(f"run {run_id!r} has finished: the signal was not delivered")
    echo(f"signal {name} delivered to run {run_id}")


@durable.command()
@click.argument("run_id")
@click.option("--reason", default="", help="Why (kept as the run's error).")
@queue_option
@timeout_option
@redis_url_option
@user_errors
def cancel(run_id: str, reason: str, queue: str, timeout: float, redis_url: str) -> None:
    """Cancel a run: a step running now is cancelled (cooperatively), the run ends cancelled."""
    from asynqpy import Client

    with Client(redis_url) as c:
        if not _timed(lambda: c.cancel(run_id, queue=queue, reason=reason, timeout=timeout), timeout):
            raise UserError(f"run {run_id!r} has finished: nothing to cancel")
    echo(f"run {run_id} cancelled")


@durable.command()
@click.argument("run_id", required=False)
@click.option("--all-failed", is_flag=True, help="Resume every run of the queue that failed or stopped in error "
                                                  "(with --function: only that function's).")
@click.option("--function", "-f", default=None, help="With --all-failed: only this function's runs.")
@click.option("--reason", default="", help="Why (kept in the run's history).")
@queue_option
@timeout_option
@redis_url_option
@user_errors
def resume(run_id: str | None, all_failed: bool, function: str | None, reason: str, queue: str, timeout: float,
           redis_url: str) -> None:
    """Resume a run that failed or stopped in error, on the code deployed now: it goes on from its
    failed step (run again, with its retries) or from where it stopped."""
    from asynqpy import Client

    if (run_id is None) == (not all_failed):
        raise UserError("give a RUN_ID or --all-failed (not both)")
    if function is not None and not all_failed:
        raise UserError("--function goes with --all-failed")
    with Client(redis_url) as c:
        if all_failed:
            done = _timed(lambda: c.resume_failed(queue, function=function, reason=reason, timeout=timeout), timeout)
            echo(f"resumed {len(done)} run(s)" + "".join(f"\n  {rid}" for rid in done))
            return
        assert run_id is not None
        if not _timed(lambda: c.resume(run_id, queue=queue, reason=reason, timeout=timeout), timeout):
            with inspector(redis_url) as insp:
                state = insp.durable_run(queue, run_id).state
            raise UserError(f"run {run_id!r} is {state}: only a failed run or one in error resumes")
    echo(f"run {run_id} resumed")


@durable.command()
@click.argument("run_id")
@queue_option
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.001),
              help="Seconds to wait for the run to end.")
@json_option
@redis_url_option
@user_errors
def result(run_id: str, queue: str, timeout: float, as_json: bool, redis_url: str) -> None:
    """Wait for a run to end and print what its function returned (the wait is woken by the run's
    commits, not polled). A run that failed, was cancelled or stopped in error, or did not end
    within --timeout: one line saying so, exit code 2."""
    from asynqpy import Client
    from asynqpy.core.durable.replay import DurableRun
    from asynqpy.core.processes.model import validate_id

    run = DurableRun(validate_id(run_id), queue)
    with Client(redis_url, encryption=encryption_ring(None)) as c:  # (a run's state sealed: $ASYNQPY_ENCRYPTION_KEYS)
        try:
            value = c.result(run, timeout=timeout)
        except TimeoutError:
            raise UserError(f"run {run_id!r} did not end within {timeout:g}s (it goes on)") from None
    if as_json:
        emit_json({"id": run_id, "queue": queue, "result": value})
    else:
        echo(payload_text(value, full=True))


def _timed(fn: Any, timeout: float) -> Any:
    try:
        return fn()
    except TimeoutError:
        raise UserError(f"no answer within {timeout:g}s (the input is queued and will still run)") from None
