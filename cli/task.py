"""``asynqpy task ls|inspect|tree|edit|search|cancel|delete|run|archive|deleteall|runall|archiveall``."""

from __future__ import annotations

import functools
import json
import textwrap
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import click
from rich.table import Table

from asynqpy import TaskInfo, TaskState
from asynqpy.core.inspector.inspection import parse_state

from .common import (
    UserError,
    When,
    ago,
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
    retried,
    show,
    timeout_text,
    user_errors,
    utc,
    visible,
)

queue_option = click.option("--queue", "-q", required=True, help="The task's queue.")


def task_ref(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The task a command acts on: ``ID`` as an argument, as ``task cancel`` and ``process``
    commands take it, with ``-q QUEUE`` optional (without it, the queue that has the task; several
    having one is an error naming them). The old ``-q QUEUE --id ID`` form still works (``--id``
    is deprecated). The command gets ``queue`` and ``task_id``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, id_arg: str | None, id_opt: str | None, queue: str | None, **kwargs: Any) -> Any:
        if id_arg is not None and id_opt is not None and id_arg != id_opt:
            raise UserError(f"two task ids: {id_arg!r} and --id {id_opt!r} (give the id once, as an argument)")
        task_id = id_arg if id_arg is not None else id_opt
        if task_id is None:
            raise UserError(f"give the task id: {click.get_current_context().command_path} ID [-q QUEUE]")
        if queue is None:
            queue = user_errors(_queue_of)(kwargs["redis_url"], task_id)
        return fn(*args, queue=queue, task_id=task_id, **kwargs)

    wrapper = click.option("--id", "id_opt", default=None, metavar="ID",
                           help="The task id (deprecated: give it as the argument).")(wrapper)
    wrapper = click.option("--queue", "-q", default=None,
                           help="The task's queue (default: look in every queue).")(wrapper)
    return click.argument("id_arg", metavar="ID", required=False)(wrapper)


def _queue_of(redis_url: str, task_id: str) -> str:
    """The queue that holds task ``task_id`` (UserError if none or several do)."""
    from asynqpy.core.spine.broker import Broker, id_arg

    id_arg(task_id)  # a task id is text (InvalidArgumentError otherwise)
    with inspector(redis_url) as insp:
        queues = insp.queues()
        b = Broker()
        found = [q for q, v in zip(queues, insp._exec.run_many([b.get_task(q, task_id) for q in queues]))
                 if isinstance(v, bytes)]
    if not found:
        raise UserError(f"task {task_id!r} not found in any queue")
    if len(found) > 1:
        raise UserError(f"tasks with id {task_id!r} are in queues {', '.join(found)}: give -q QUEUE")
    return found[0]
STATES_HELP = "pending, active, scheduled, retry, archived, completed, aggregating, targeted, waiting or blocked"
state_option = click.option("--state", "-s", required=True, help=f"The tasks' state: {STATES_HELP}.")


@click.group()
def task() -> None:
    """List, inspect, cancel, delete, run and archive tasks."""


def _when(t: TaskInfo, now: datetime) -> tuple[str, str]:
    """The state-specific time column: (header, text)."""
    s = t.state
    if s is TaskState.PENDING:
        return "enqueued", ago(t.enqueued_at, now)
    if s is TaskState.ACTIVE:
        return "lease", ("ORPHANED " if t.orphaned else "") + ago(t.lease_until, now)
    if s in (TaskState.SCHEDULED, TaskState.RETRY):
        return "due", ago(t.next_process_at, now)
    if s is TaskState.ARCHIVED:
        return "archived", ago(t.archived_at, now)
    return "completed", ago(t.completed_at, now)


def task_table(tasks: list[TaskInfo], state: TaskState, full: bool) -> Table:
    """A page of tasks in ``state``, in 80 columns unless ``full``."""
    now = datetime.now(timezone.utc)
    failed = state in (TaskState.RETRY, TaskState.ARCHIVED)
    t = Table(box=None, pad_edge=False, header_style="bold")
    t.add_column("id", no_wrap=True)
    t.add_column("type", no_wrap=not full, max_width=None if full else 16, overflow="ellipsis")
    t.add_column(_when(tasks[0], now)[0] if tasks else "when", no_wrap=True)
    if failed:
        t.add_column("retried", justify="right", no_wrap=True)
    active = state is TaskState.ACTIVE
    if active:
        t.add_column("progress", no_wrap=not full, max_width=None if full else 14, overflow="ellipsis")
    t.add_column("last error" if failed else "result" if state is TaskState.COMPLETED else "payload",
                 no_wrap=not full, overflow="fold" if full else "ellipsis")
    width = 28 if failed else 32
    for x in tasks:
        if failed:
            extra = [retried(x.retried, x.max_retry), clip(x.last_error or "-", full, width)]
        elif state is TaskState.COMPLETED:
            extra = [payload_text(x.result, full, width)]
        else:
            extra = [payload_text(x.payload, full, width)]
        if active:
            extra.insert(0, payload_text(getattr(x, "progress", None), full, 14))
        t.add_row(x.id, x.type, _when(x, now)[1], *extra)
    return t


@task.command("ls")
@queue_option
@click.option("--state", "-s", default="pending", show_default=True, help=f"The tasks' state: {STATES_HELP}.")
@click.option("--group", "-g", default=None, help="The aggregation group (with --state aggregating).")
@click.option("--page", default=1, show_default=True, type=click.IntRange(min=1), help="Which page (from 1).")
@click.option("--size", "page_size", default=30, show_default=True, type=click.IntRange(1, 1000),
              help="Tasks per page (at most 1000).")
@json_option
@full_option
@encryption_keys_option
@redis_url_option
@user_errors
def ls(queue: str, state: str, group: str | None, page: int, page_size: int, as_json: bool, full: bool,
       encryption_keys_file: str | None, redis_url: str) -> None:
    """List one page of the tasks in a state (default: pending). Order: pending oldest first (the
    order they run in), active/scheduled/retry soonest first, archived/completed newest first,
    aggregating (with --group) oldest first."""
    st = parse_state(state)
    if st is TaskState.AGGREGATING and not group:
        raise UserError("aggregating tasks are listed per group: give --group (`asynqpy queue groups Q` lists them)")
    with inspector(redis_url, encryption=encryption_ring(encryption_keys_file)) as insp:
        tasks = insp.list_tasks(queue, st, page, page_size, group or "")
        if as_json:
            total = 0
        elif group:
            total = next((g.size for g in insp.groups(queue) if g.group == group), 0)
        else:
            total = getattr(insp.queue_info(queue), st.value)
    if as_json:
        emit_json(tasks)
        return
    out = console()
    if not tasks:
        out.print(f"no {st.value} tasks in queue {queue}" + (f" on page {page}" if page > 1 else ""))
        return
    show(out, task_table(tasks, st, full))
    first = (page - 1) * page_size + 1
    out.print(f"\n{st.value} {first:,}-{first + len(tasks) - 1:,} of {total:,} in queue {queue} · page {page}"
              + ("" if full else " · --full shows all"))


Rows = list[tuple[str, str]]


def detail_table(x: TaskInfo, full: bool) -> Table:
    """``task inspect``'s fields, one row each: the sections of :data:`DETAIL_SECTIONS` in order,
    each giving the rows that apply to the task."""
    t = Table(box=None, show_header=False, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    now = datetime.now(timezone.utc)
    for section in DETAIL_SECTIONS:
        for k, v in section(x, full, now):
            t.add_row(k, v)
    return t


def _identity_rows(x: TaskInfo, full: bool, now: datetime) -> Rows:
    """What the task is: id, queue, type, state, payload, retries; and its times (those set)."""
    state = x.state.value + (" (ORPHANED: its lease expired; the recoverer retries it)" if x.orphaned else "")
    rows = [("id", x.id), ("queue", x.queue), ("type", x.type), ("state", state),
            ("payload", payload_text(x.payload, full, 200)),
            ("retried", f"{retried(x.retried, x.max_retry)} (retries so far / most allowed)")]
    times = [("enqueued", x.enqueued_at), ("lease until", x.lease_until), ("next run", x.next_process_at),
             ("last failed", x.last_failed_at), ("archived", x.archived_at), ("completed", x.completed_at),
             ("deadline", x.deadline)]
    return rows + [(k, f"{utc(v)} ({ago(v, now)})") for k, v in times if v is not None]


def _settings_rows(x: TaskInfo, full: bool, now: datetime) -> Rows:
    """Its last error, timeout, and the options it was given (priority, group, tenant, key)."""
    rows = [("last error", clip(x.last_error, full, 200))] if x.last_error else []
    rows.append(("timeout", timeout_text(x.timeout)))
    if x.priority != 5:
        rows.append(("priority", f"{x.priority} (0 lowest, 9 highest, 5 the default)"))
    optional = (("group", x.group), ("tenant", x.tenant),
                ("key", x.key and f"{x.key} (its tasks run one at a time, in order)"))
    return rows + [(k, v) for k, v in optional if v]


HELD_WHY = {"type": "its type is blocked in the queue: `asynqpy queue unblock`",
            "version": "it waits for a worker of version {} or newer"}
"""Why a held task waits, by what holds it (``version``: the worker version it needs)."""


def _held_rows(x: TaskInfo, full: bool, now: datetime) -> Rows:
    """What holds it back (a blocked type, a worker version), and the task it replaced."""
    rows: Rows = []
    if x.held:
        why = HELD_WHY.get(x.held, "").format(x.min_worker_version or "?")
        rows.append(("held", f"{x.held} ({why})" if why else x.held))
    if x.min_worker_version:
        rows.append(("min worker version", x.min_worker_version))
    if x.replaced:
        rows.append(("replaced", f"{x.replaced} (a debounced enqueue replaced that task)"))
    return rows


def _runs_rows(x: TaskInfo, full: bool, now: datetime) -> Rows:
    """A targeted task's workers and each one's run (with its result)."""
    if x.workers is None and x.runs_wanted <= 1:
        return []
    rows = [("workers", ", ".join(x.workers) if x.workers is not None else "any"),
            ("runs", f"{x.runs_wanted} distinct worker(s) must succeed")]
    for name, state in sorted(x.runs.items()):
        got = f" → {payload_text(x.run_results[name], full, 80)}" if name in x.run_results else ""
        rows.append((f"  run on {name}", state + got))
    return rows


def _workflow_rows(x: TaskInfo, full: bool, now: datetime) -> Rows:
    """Its parents (each one's state, a completed one's result), what it does if one fails, and
    its children (the first with how to see the tree)."""
    rows: Rows = []
    for i, p in enumerate(x.parents):
        end = p.state + (f" → {payload_text(p.result, full, 80)}" if p.state == "completed" else "")
        rows.append(("parents" if i == 0 else "", f"{p.queue}/{p.id}: {end}"))
    if x.parents and x.on_parent_failure:
        rows.append(("on parent failure", x.on_parent_failure))
    for i, (cq, cid) in enumerate(x.children):
        rows.append(("children" if i == 0 else "", f"{cq}/{cid} (`asynqpy task tree -q {x.queue} --id {x.id}`)"
                     if i == 0 else f"{cq}/{cid}"))
    return rows


def _outcome_rows(x: TaskInfo, full: bool, now: datetime) -> Rows:
    """How long it is kept, its result, its progress and its headers."""
    rows: Rows = []
    if x.retention:
        rows.append(("retention", f"{x.retention:g}s"))
    if x.state is TaskState.COMPLETED:
        rows.append(("result", payload_text(x.result, full, 200)))
    if getattr(x, "progress", None) is not None:
        rows.append(("progress", payload_text(x.progress, full, 200)))
    headers = getattr(x, "headers", None)
    if headers:
        rows.append(("headers", clip(", ".join(f"{k}={v}" for k, v in headers.items()), full, 400)))
    return rows


DETAIL_SECTIONS: tuple[Callable[[TaskInfo, bool, datetime], Rows], ...] = (
    _identity_rows, _settings_rows, _held_rows, _runs_rows, _workflow_rows, _outcome_rows)
"""The sections of ``task inspect``, in the order they are shown."""


LOG_LINES_SHOWN = 20
"""Lines of a task's logs ``task inspect`` shows without --full (the newest)."""


def show_logs(out: Any, logs: list[Any], full: bool) -> None:
    """The task's logs after its fields: ``#attempt time text`` per line, folded to the
    terminal's width (continuations and a line's own line breaks indented); the newest
    LOG_LINES_SHOWN unless ``full``."""
    if not logs:
        return
    shown = logs if full else logs[-LOG_LINES_SHOWN:]
    out.print()
    more = f", the newest {len(shown)} of {len(logs)} (--full: all)" if len(shown) < len(logs) else ""
    out.print(f"[bold]logs[/bold] (#attempt){more}", markup=True)
    width = max(40, out.width)
    text = []
    for ln in shown:
        head = f"#{ln.attempt} {utc(ln.at)} "
        for i, part in enumerate(visible(str(ln.text)).rstrip().splitlines() or [""]):
            text += textwrap.wrap(part, width, initial_indent=head if i == 0 else "    ", subsequent_indent="    ",
                                  break_on_hyphens=False, drop_whitespace=True) or [head.rstrip()]
    out.file.write("".join(line.rstrip() + "\n" for line in text))
    out.file.flush()


@task.command()
@task_ref
@json_option
@full_option
@encryption_keys_option
@redis_url_option
@user_errors
def inspect(queue: str, task_id: str, as_json: bool, full: bool, encryption_keys_file: str | None,
            redis_url: str) -> None:
    """Show one task in full detail (an encrypted payload, result or logs decrypted with
    --encryption-keys, else shown as "encrypted")."""
    ring = encryption_ring(encryption_keys_file)
    with inspector(redis_url, encryption=ring) as insp:
        info = insp.task_info(queue, task_id)
    if ring is not None:  # keys given, and still a value they do not open: why, in one line (exit 2)
        for value in (info.payload, info.result):
            if getattr(value, "reason", ""):
                raise UserError(f"task {task_id!r}: {value.reason}")
    if as_json:
        emit_json(info)
        return
    out = console()
    show(out, detail_table(info, full))
    show_logs(out, getattr(info, "logs", []), full)
    trace = getattr(info, "traceback", "")  # the last failed attempt's traceback (bounded by the library)
    if trace:
        out.print()
        out.print("[bold]traceback[/bold] (last failed attempt)", markup=True)
        lines = visible(str(trace)).rstrip().splitlines()  # as is: no folding (escaped: cli/common visible)
        out.file.write("".join(line.rstrip() + "\n" for line in lines))
        out.file.flush()


@task.command()
@task_ref
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100_000),
              help="Most tasks to show.")
@json_option
@redis_url_option
@user_errors
def tree(queue: str, task_id: str, limit: int, as_json: bool, redis_url: str) -> None:
    """Show the workflow a task belongs to: from its roots, each task with the tasks waiting on
    it (after=, chain, group) and their states."""
    with inspector(redis_url) as insp:
        roots = insp.workflow(queue, task_id, limit)
    if as_json:
        emit_json(roots)
        return
    from rich.markup import escape
    from rich.text import Text
    from rich.tree import Tree

    out = console()
    colors = {"completed": "green", "archived": "red", "active": "cyan", "waiting": "yellow", "gone": "dim"}
    for root in roots:
        def label(n: Any) -> str:
            mark = " [bold]◀[/bold]" if (n.queue, n.id) == (queue, task_id) else ""
            again = " (again: see above)" if n.repeated else ""
            c = colors.get(n.state, "")
            state = f"[{c}]{n.state}[/{c}]" if c else n.state
            return f"{escape(n.queue)}/{escape(n.id)} {escape(n.type)} {state}{again}{mark}"

        top = Tree(Text.from_markup(label(root)))
        stack = [(root, top)]
        while stack:
            node, branch = stack.pop()
            for child in node.children:
                sub = branch.add(Text.from_markup(label(child)))
                stack.append((child, sub))
        out.print(top)


@task.command()
@click.argument("ids", nargs=-1, required=True)
@click.option("--queue", "-q", default=None, help="The tasks' queue (default: look in every queue).")
@redis_url_option
@user_errors
def cancel(ids: tuple[str, ...], queue: str | None, redis_url: str) -> None:
    """Cancel running tasks IDS: each handler is cancelled at once and its task archived with the
    error "cancelled by an operator" (never retried on its own; `task run` runs it again)."""
    with inspector(redis_url) as insp:
        for id in ids:
            info = insp.cancel(id, queue)
            echo(f"cancelled task {id} in queue {info.queue} (archived; `task run` reruns it)")


@task.command()
@task_ref
@click.option("--payload", default=None, help="The new payload, as JSON.")
@click.option("--max-retry", type=click.IntRange(min=0), default=None, help="The new max_retry.")
@click.option("--at", "process_at", type=When(), default=None,
              help="New due time: Unix seconds or ISO 8601 (local time without a zone).")
@click.option("--in", "process_in", type=click.FloatRange(min=0), default=None,
              help="New due time, seconds from now (0: now).")
@click.option("--priority", type=click.IntRange(0, 9), default=None,
              help="The new priority, 0 (lowest) to 9 (highest).")
@click.option("--workers", default=None,
              help="A targeted task's allowed workers (comma-separated names; '*': any worker).")
@json_option
@redis_url_option
@user_errors
def edit(queue: str, task_id: str, payload: str | None, max_retry: int | None, process_at: float | datetime | None,
         process_in: float | None, priority: int | None, workers: str | None, as_json: bool, redis_url: str) -> None:
    """Change a pending, scheduled or retry task: its payload, max_retry, priority or due time (due
    later, a pending task becomes scheduled; due now, it becomes pending)."""
    changes = _changes(payload, max_retry, priority, process_at, process_in)
    if workers is not None and changes:
        raise UserError("--workers changes a targeted task's workers: give it alone")
    if workers is None and not changes:
        raise UserError("nothing to change: give --payload, --max-retry, --priority, --at or --in")
    with inspector(redis_url) as insp:
        if workers is not None:
            info = insp.set_workers(queue, task_id, _worker_names(workers))
        else:
            info = insp.edit_task(queue, task_id, **changes)
    if as_json:
        emit_json(info)
        return
    due = f" (due {utc(info.next_process_at)})" if info.next_process_at else ""
    echo(f"edited task {task_id} (queue {queue}): {info.state.value}{due}")


def _changes(payload: str | None, max_retry: int | None, priority: int | None, process_at: float | datetime | None,
             process_in: float | None) -> dict[str, Any]:
    """``task edit``'s changes, as ``Inspector.edit_task`` takes them: the options given (the
    payload parsed from JSON; --at and --in not both)."""
    changes: dict[str, Any] = {}
    if payload is not None:
        try:
            changes["payload"] = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise UserError(f"--payload is not JSON: {exc}") from None
    if process_at is not None and process_in is not None:
        raise UserError("give --at or --in, not both")
    given = {"max_retry": max_retry, "priority": priority, "process_at": process_at, "process_in": process_in}
    return {**changes, **{k: v for k, v in given.items() if v is not None}}


def _worker_names(workers: str) -> list[str] | None:
    """--workers as ``Inspector.set_workers`` takes it: '*' is any worker (None), else the
    comma-separated names."""
    return None if workers.strip() == "*" else [w.strip() for w in workers.split(",") if w.strip()]


def _one(verb: str, done: str, help: str) -> None:
    """Register ``task VERB ID [-q Q]``."""

    @task.command(verb, help=help)
    @task_ref
    @redis_url_option
    @user_errors
    def command(queue: str, task_id: str, redis_url: str) -> None:
        with inspector(redis_url) as insp:
            getattr(insp, f"{verb}_task")(queue, task_id)
        echo(f"{done} task {task_id} (queue {queue})")


def _all(verb: str, done: str, help: str) -> None:
    """Register ``task VERBall --queue Q --state S``."""

    @task.command(f"{verb}all", help=help)
    @queue_option
    @state_option
    @redis_url_option
    @user_errors
    def command(queue: str, state: str, redis_url: str) -> None:
        st = parse_state(state)
        with inspector(redis_url) as insp:
            n = getattr(insp, f"{verb}_all")(queue, st)
        echo(f"{done} {n:,} {st.value} task(s) in queue {queue}")


_one("delete", "deleted", "Delete a task (any state but active: cancel a running task instead).")
_one("run", "moved to pending:", "Run a scheduled, retry or archived task now (it moves to pending).")
_one("archive", "archived", "Archive a pending, scheduled or retry task.")
_all("delete", "deleted", "Delete every pending, scheduled, retry, archived or completed task of a queue.")
_all("run", "moved to pending:", "Run every scheduled, retry or archived task of a queue now.")
_all("archive", "archived", "Archive every pending, scheduled or retry task of a queue.")



def _register_search() -> None:
    """``task search`` (cli/task_search.py: a module of its own, by size)."""
    from .task_search import search

    task.add_command(search)


_register_search()
