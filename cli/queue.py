"""``asynqpy queue ls|inspect|history|groups|limit|tenants|tenant|block|unblock|blocked|pause|unpause|rm``, and
one command per queue setting of core/spine/queue_settings.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from asynqpy import QueueInfo
from asynqpy.core.spine.queue_settings import QUEUE_SETTINGS, QueueSetting
from asynqpy.core.tenants.plans import TenantInfo
from asynqpy.core.tenants.plans import state_text as tenant_state

from .common import (
    UserError,
    console,
    echo,
    emit_json,
    inspector,
    json_option,
    latency,
    redis_url_option,
    show,
    size,
    user_errors,
    utc,
)

if TYPE_CHECKING:
    from asynqpy import Inspector


@click.group()
def queue() -> None:
    """List, inspect, pause and remove queues."""


@queue.command("ls")
@json_option
@redis_url_option
@user_errors
def ls(as_json: bool, redis_url: str) -> None:
    """List the queue names."""
    with inspector(redis_url) as insp:
        names = insp.queues()
    if as_json:
        emit_json(names)
    elif not names:
        echo("no queues yet")
    else:
        echo("\n".join(names))


def info_table(q: QueueInfo) -> Table:
    """One queue in detail, as a two-column table."""
    t = Table(box=None, show_header=False, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column()
    t.add_row("queue", f"{q.queue} ({'paused' if q.paused else 'running'})")
    t.add_row("size", f"{q.size:,} task(s), memory ~{size(q.memory_bytes)}")
    t.add_row("latency", f"{latency(q.pending, q.latency)} (age of the oldest pending task)"
              if q.pending else "- (no pending task)")
    t.add_row("tasks", f"pending {q.pending:,} · active {q.active:,} · scheduled {q.scheduled:,}")
    t.add_row("", f"retry {q.retry:,} · archived {q.archived:,} · completed {q.completed:,}")
    if q.waiting:
        t.add_row("", f"waiting {q.waiting:,} (after=: on their parents; `asynqpy task ls -q {q.queue} -s waiting`)")
    if q.blocked:
        t.add_row("", f"blocked {q.blocked:,} (key=: behind an earlier task of their key)")
    if q.targeted:
        t.add_row("", f"targeted {q.targeted:,} (workers= or runs=; `asynqpy task ls -q {q.queue} -s targeted`)")
    if q.aggregating or q.groups:
        t.add_row("", f"aggregating {q.aggregating:,} in {q.groups:,} group(s) (`asynqpy queue groups {q.queue}`)")
    t.add_row("processed", f"today {q.processed_today:,} · total {q.processed_total:,}")
    t.add_row("failed", f"today {q.failed_today:,} · total {q.failed_total:,}")
    t.add_row("trimmed", f"{q.trimmed:,} archived task(s) deleted by the archive limits")
    for setting in QUEUE_SETTINGS:  # (core/spine/queue_settings.py)
        if (text := setting.summary(q)) is not None:
            t.add_row(setting.name, text)
    t.add_row("as of", utc(q.timestamp))
    return t


@queue.command()
@click.argument("queues", nargs=-1, required=True)
@json_option
@redis_url_option
@user_errors
def inspect(queues: tuple[str, ...], as_json: bool, redis_url: str) -> None:
    """Show QUEUES in detail: counts per state, latency, counters, memory."""
    with inspector(redis_url) as insp:
        infos = [insp.queue_info(q) for q in queues]
    if as_json:
        emit_json(infos)
        return
    out = console()
    for i, q in enumerate(infos):
        if i:
            out.print()
        show(out, info_table(q))


@queue.command()
@click.argument("queues", nargs=-1, required=True)
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 90), help="How many days (UTC).")
@json_option
@redis_url_option
@user_errors
def history(queues: tuple[str, ...], days: int, as_json: bool, redis_url: str) -> None:
    """Processed and failed tasks per day (UTC) of QUEUES, newest first."""
    with inspector(redis_url) as insp:
        rows = {q: insp.history(q, days) for q in queues}
    if as_json:
        emit_json(rows)
        return
    out = console()
    for i, (q, days_) in enumerate(rows.items()):
        t = Table(title=f"queue {q}" if len(rows) > 1 else None, box=None, pad_edge=False, header_style="bold",
                  title_justify="left")
        for col in ("date (UTC)", "processed", "failed", "failure rate"):
            t.add_column(col, justify="left" if col.startswith("date") else "right")
        for d in days_:
            rate = f"{100 * d.failed / d.processed:.1f}%" if d.processed else "-"
            t.add_row(d.date.isoformat(), f"{d.processed:,}", f"{d.failed:,}", rate)
        if i:
            out.print()
        show(out, t)


@queue.command()
@click.argument("queue_name", metavar="QUEUE")
@json_option
@redis_url_option
@user_errors
def groups(queue_name: str, as_json: bool, redis_url: str) -> None:
    """The aggregation groups of QUEUE: size, when the oldest and newest task joined (UTC)."""
    with inspector(redis_url) as insp:
        found = insp.groups(queue_name)
    if as_json:
        emit_json(found)
        return
    if not found:
        echo(f"no aggregation groups in queue {queue_name}")
        return
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("group", "size", "oldest joined", "newest joined"):
        t.add_column(col, justify="right" if col == "size" else "left")
    for g in found:
        t.add_row(g.group, f"{g.size:,}", utc(g.oldest), utc(g.newest))
    show(console(), t)


@queue.command()
@click.argument("queue_name", metavar="QUEUE")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="At most this many of the queue's tasks active at once, across all workers.")
@click.option("--rate", default=None, help="At most this many task starts: 100/s, 30/m, 500/h (or per second).")
@click.option("--burst", type=click.IntRange(min=1), default=None,
              help="Starts allowed at once after a quiet spell (the token bucket's size; default 1).")
@click.option("--clear", is_flag=True, help="Remove every limit of the queue.")
@json_option
@redis_url_option
@user_errors
def limit(queue_name: str, concurrency: int | None, rate: str | None, burst: int | None, clear: bool,
          as_json: bool, redis_url: str) -> None:
    """Show or set QUEUE's limits, enforced across every worker where tasks are handed out."""
    with inspector(redis_url) as insp:
        if clear:
            if concurrency is not None or rate is not None or burst is not None:
                raise UserError("--clear takes no limits with it")
            insp.clear_limits(queue_name)
        elif concurrency is not None or rate is not None or burst is not None:
            insp.set_limits(queue_name, concurrency=concurrency, rate=rate, burst=burst)
        got = insp.limits(queue_name)
    if as_json:
        emit_json(got)
        return
    if got.concurrency is None and got.rate is None:
        echo(f"queue {queue_name}: no limits")
        return
    parts = []
    if got.concurrency is not None:
        parts.append(f"concurrency {got.concurrency}")
    if got.rate is not None:
        parts.append(f"rate {got.rate:g}/s (burst {got.burst})")
    echo(f"queue {queue_name}: " + ", ".join(parts))


def _setting_value(s: QueueSetting, value: str) -> Any:
    """The command's argument as its setting's first input takes it (an int within its bounds)."""
    first = s.params[0]
    if not first.annotation.startswith("int"):
        return value
    low, high = first.low, first.high
    if not value.strip().lstrip("-").isdigit() or (low is not None and int(value) < low) or (
            high is not None and int(value) > high):
        bounds = "".join(f" {w} {n}" for w, n in (("from", low), ("to", high)) if n is not None)
        raise UserError(f"{first.metavar.strip('[]')} must be an integer{bounds} (--clear removes the {s.name}), "
                        f"got {value!r}")
    return int(value)


def _setting_command(s: QueueSetting) -> click.Command:
    """The ``asynqpy queue <command>`` of a queue setting (core/spine/queue_settings.py QUEUE_SETTINGS):
    show it, set it (its first input the argument, the others flags; per tenant with --tenant when
    it has one) or --clear it; bad input is one line on stderr and exit code 2, nothing written."""
    first, rest = s.params[0], s.params[1:]
    name = first.metavar.strip("[]")

    def run(queue_name: str, value: str | None, clear: bool, as_json: bool, redis_url: str, tenant_name: str = "",
            **flags: Any) -> None:
        if clear and value is not None:
            raise UserError(f"--clear takes no {name} with it")
        for p in rest:
            if p.choices and flags[p.name] not in p.choices:
                raise UserError(f"--{p.name} must be {' or '.join(p.choices)}, got {flags[p.name]!r}")
        given = None if value is None else _setting_value(s, value)
        with inspector(redis_url) as insp:
            if value is not None or clear:
                if tenant_name:
                    insp.set_tenant(queue_name, tenant_name, **{first.name: given}, **flags)
                else:
                    getattr(insp, s.setter)(queue_name, given, **flags)
            got = getattr(insp, s.getter)(queue_name, *([tenant_name] if s.tenant else []))
        if as_json:
            emit_json(got)
            return
        who = f"tenant {tenant_name} of queue {queue_name}" if tenant_name else f"queue {queue_name}"
        echo(f"{who}: {s.describe(got)}")

    run.__doc__ = s.command_help
    command: Any = user_errors(run)
    for option in (redis_url_option, json_option,
                   click.option("--clear", is_flag=True, help=f"Remove the {s.name}.")):
        command = option(command)
    if s.tenant:
        command = click.option("--tenant", "tenant_name", default="",
                               help=f"The {s.name} of this tenant's tasks, not the queue's.")(command)
    for p in reversed(rest):
        command = click.option(f"--{p.name}", default=p.default, show_default=True, help=p.help)(command)
    command = click.argument("value", metavar=first.metavar, required=False)(command)
    command = click.argument("queue_name", metavar="QUEUE")(command)
    # (ignore_unknown_options: a value such as "-1" is a bad value, not an option)
    return click.command(s.command, context_settings={"ignore_unknown_options": True})(command)


for _setting in QUEUE_SETTINGS:
    queue.add_command(_setting_command(_setting))


@queue.command("tenants")
@click.argument("queue_name", metavar="QUEUE")
@click.option("--after", default="", help="Start after this tenant (the last of the page before).")
@click.option("--count", type=click.IntRange(1, 1000), default=100, show_default=True, help="Tenants at most.")
@click.option("--weight", type=int, default=None, help="Set the default weight of every tenant without its own.")
@click.option("--concurrency", type=int, default=None,
              help="Set the default concurrency of every tenant without its own (0: no limit).")
@click.option("--rate", default=None, metavar="RATE",
              help="Set the default rate of every tenant without its own, each its own bucket: 50/s, 300/m (0: none).")
@click.option("--burst", type=int, default=None, help="With --rate: tasks it lets start at once (default 1).")
@click.option("--clear", is_flag=True, help="Remove the queue's defaults for its tenants.")
@json_option
@redis_url_option
@user_errors
def tenants(queue_name: str, after: str, count: int, weight: int | None, concurrency: int | None, rate: str | None,
            burst: int | None, clear: bool, as_json: bool, redis_url: str) -> None:
    """List QUEUE's tenants that have pending tasks, in name order (pending, active, weight,
    concurrency, rate, state); with --weight/--concurrency/--rate/--clear, set the defaults of its
    tenants."""
    settings = _given(weight, concurrency, rate, burst)
    if clear and settings:
        raise UserError("--clear takes no other setting with it")
    with inspector(redis_url) as insp:
        if clear or settings:
            _set_defaults(insp, queue_name, clear, weight, concurrency, rate, burst)
        got = insp.tenants(queue_name, after=after, count=count)
    if as_json:
        emit_json(got)
        return
    if not got:
        echo(f"no tenants in queue {queue_name}" + (f" after {after}" if after else "")
             + " (a tenant is listed while it has pending tasks)")
        return
    show(console(), _tenants_table(got))
    if len(got) == count:
        echo(f"(more: --after {got[-1].tenant})")


def _given(*settings: Any) -> bool:
    """Whether any of the options ``settings`` was given (None: left out)."""
    return any(v is not None for v in settings)


def _set_defaults(insp: Inspector, queue_name: str, clear: bool, weight: int | None, concurrency: int | None,
                  rate: str | None, burst: int | None) -> None:
    """``queue tenants --clear`` or ``--weight/--concurrency/--rate/--burst``: the queue's
    defaults for its tenants set (or removed), and the defaults now said."""
    d = (insp.clear_tenant_defaults(queue_name) if clear
         else insp.set_tenant_defaults(queue_name, weight=weight, concurrency=concurrency,
                                       rate=_rate_arg(rate), burst=burst))
    echo(f"queue {queue_name}: tenants' defaults weight {d.weight}, concurrency "
         f"{d.concurrency or 'none'}, rate {_rate_text(d.rate, d.burst)}")


def _tenants_table(got: list[TenantInfo]) -> Table:
    t = Table("tenant", "pending", "active", "weight", "concurrency", "rate", "state")
    for ti in got:
        t.add_row(ti.tenant, str(ti.pending), str(ti.active), str(ti.weight), str(ti.concurrency or "-"),
                  _rate_text(ti.rate, ti.burst) if ti.rate else "-", tenant_state(ti, short=True))
    return t


@queue.command("tenant")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("tenant_name", metavar="TENANT")
@click.option("--weight", type=int, default=None,
              help="1..100: a tenant of weight 3 gets three turns to one of weight 1 while both have work.")
@click.option("--concurrency", type=int, default=None,
              help="At most this many of the tenant's tasks active at once, across all workers (0: no limit).")
@click.option("--rate", default=None, metavar="RATE",
              help="At most this many of the tenant's tasks start, across all workers: 50/s, 300/m (0: no limit).")
@click.option("--burst", type=int, default=None, help="With --rate: tasks it lets start at once (default 1).")
@click.option("--pause", "pause_", is_flag=True, help="Hold the tenant's pending tasks back (the others go on).")
@click.option("--resume", is_flag=True, help="Let a paused tenant's tasks be taken again.")
@click.option("--clear", is_flag=True, help="Back to the defaults (weight 1, running).")
@json_option
@redis_url_option
@user_errors
def tenant(queue_name: str, tenant_name: str, weight: int | None, concurrency: int | None, rate: str | None,
           burst: int | None, pause_: bool, resume: bool, clear: bool, as_json: bool, redis_url: str) -> None:
    """Show or change one TENANT's settings in QUEUE (docs/tenants.md)."""
    if pause_ and resume:
        raise UserError("give --pause or --resume, not both")
    if clear and (_given(weight, concurrency, rate, burst) or pause_ or resume):
        raise UserError("--clear takes no other setting with it")
    with inspector(redis_url) as insp:
        if clear:
            got = insp.clear_tenant(queue_name, tenant_name)
        else:
            got = insp.set_tenant(queue_name, tenant_name, weight=weight, concurrency=concurrency,
                                  paused=True if pause_ else (False if resume else None), rate=_rate_arg(rate),
                                  burst=burst)
    if as_json:
        emit_json(got)
        return
    echo(_tenant_line(queue_name, got))


def _tenant_line(queue_name: str, got: TenantInfo) -> str:
    """``queue tenant``'s answer: the tenant's weight, limits, state and pending tasks."""
    state = tenant_state(got)
    limit = f", concurrency {got.concurrency} ({got.active} active)" if got.concurrency else ""
    per = f", rate {_rate_text(got.rate, got.burst)}" if got.rate else ""
    return (f"tenant {got.tenant} of queue {queue_name}: weight {got.weight}{limit}{per}, {state}, "
            f"{got.pending} pending")


def _rate_arg(rate: str | None) -> float | str | None:
    """--rate as given: "0" is no limit, anything else the Inspector reads ("50/s", "300/m", "12.5")."""
    if rate is None:
        return None
    try:
        return float(rate)
    except ValueError:
        return rate


def _rate_text(rate: float, burst: int) -> str:
    if not rate:
        return "none"
    return f"{rate:g}/s" + (f" (burst {burst})" if burst > 1 else "")


@queue.command("block")
@click.argument("queue_name", metavar="QUEUE")
@click.option("--type", "task_type", required=True, metavar="TYPE", help="The task type to block.")
@redis_url_option
@user_errors
def block(queue_name: str, task_type: str, redis_url: str) -> None:
    """Block a task TYPE in QUEUE while old and new workers overlap in a deploy: no worker runs its
    tasks (they are held; running ones finish) until `queue unblock`. A whole queue: `queue pause`.
    See docs/deploy.md."""
    with inspector(redis_url) as insp:
        blocked = insp.block_type(queue_name, task_type)
    echo(f"blocked type {task_type} in queue {queue_name} (blocked: {', '.join(blocked)})")


@queue.command("unblock")
@click.argument("queue_name", metavar="QUEUE")
@click.option("--type", "task_type", required=True, metavar="TYPE", help="The task type to unblock.")
@redis_url_option
@user_errors
def unblock(queue_name: str, task_type: str, redis_url: str) -> None:
    """Unblock a task TYPE in QUEUE: its held tasks go back to the front of the queue, oldest first."""
    with inspector(redis_url) as insp:
        moved = insp.unblock_type(queue_name, task_type)
        left = insp.blocked_types(queue_name)
    echo(f"unblocked type {task_type} in queue {queue_name}: {moved} held task(s) back in the queue"
               + (f" (still blocked: {', '.join(left)})" if left else ""))


@queue.command("blocked")
@click.argument("queue_name", metavar="QUEUE")
@json_option
@redis_url_option
@user_errors
def blocked(queue_name: str, as_json: bool, redis_url: str) -> None:
    """The task types blocked in QUEUE."""
    with inspector(redis_url) as insp:
        types = insp.blocked_types(queue_name)
    if as_json:
        emit_json(types)
        return
    echo("\n".join(types) if types else f"no type is blocked in queue {queue_name}")


def _switch(verb: str, yes: str, no: str, help: str) -> None:
    """Register ``queue pause|unpause Q...``."""

    @queue.command(verb, help=help)
    @click.argument("queues", nargs=-1, required=True)
    @redis_url_option
    @user_errors
    def command(queues: tuple[str, ...], redis_url: str) -> None:
        with inspector(redis_url) as insp:
            for q in queues:
                echo((yes if getattr(insp, verb)(q) else no).format(q=q))


_switch("pause", "paused queue {q}", "queue {q} was already paused",
        "Pause QUEUES: workers stop taking their tasks (tasks stay where they are).")
_switch("unpause", "unpaused queue {q}", "queue {q} was not paused", "Unpause QUEUES.")


@queue.command("events")
@click.argument("queues", nargs=-1, required=True)
@click.option("--max-len", type=click.IntRange(0, 10_000_000), default=None,
              help="Keep about this many events per queue (0 = off: none is written, the kept ones are deleted).")
@click.option("--off", is_flag=True, help="Switch the event stream off (the same as --max-len 0).")
@click.option("--on", is_flag=True, help="Switch it on again, with the default length (10000).")
@click.option("--active/--no-active", default=None,
              help="Write 'active' events always, or only while someone follows the stream (the default).")
@redis_url_option
@user_errors
def events_setting(queues: tuple[str, ...], max_len: int | None, off: bool, on: bool, active: bool | None,
                   redis_url: str) -> None:
    """Show or set how many lifecycle events QUEUES keep (see `asynqpy events`)."""
    if sum([max_len is not None, off, on]) > 1:
        raise UserError("give one of --max-len, --off, --on")
    value = 0 if off else 10_000 if on else max_len
    with inspector(redis_url) as insp:
        for q in queues:
            if value is not None or active is not None:
                insp.set_events(q, insp.events_max_len(q) if value is None else value, active)
            n = insp.events_max_len(q)
            when = "always" if insp.events_active(q) else "while followed"
            echo(f"queue {q}: events {'off' if n == 0 else f'on, about {n:,} kept (active events {when})'}")


@queue.command()
@click.argument("queues", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Delete the queue's tasks too (none may be active).")
@redis_url_option
@user_errors
def rm(queues: tuple[str, ...], force: bool, redis_url: str) -> None:
    """Remove QUEUES. A queue must be empty, unless --force (then its tasks are deleted; it must
    have no active task)."""
    with inspector(redis_url) as insp:
        for q in queues:
            insp.remove_queue(q, force=force)
            echo(f"removed queue {q}")
