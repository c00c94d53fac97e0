"""The dashboard's screens as pure functions: (state, data, terminal size, now) -> a rich renderable
of at most ``height`` lines, each cut to ``width`` columns (cells are truncated with an ellipsis,
never wrapped). No I/O here: tests render to a recording Console."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from asynqpy.core.model.task import TaskInfo, TaskState
from asynqpy.core.tenants.plans import TenantInfo

from .common import clip, latency, payload_text, retried
from .dash_state import STATES, TABS, DashState, Throughput, View, pages

if TYPE_CHECKING:
    from asynqpy import QueueInfo, ServerInfo

PREVIEW = 200
"""Characters of a payload, result or error formatted per row (the column then cuts it to fit)."""
QUEUE_VIEW_CHROME = 5
"""Lines of the queue view that are not task rows: title, queue summary, tabs, table header, footer."""


def page_size_for(height: int) -> int:
    """Tasks per page in the queue view of a terminal ``height`` lines tall."""
    return max(1, height - QUEUE_VIEW_CHROME)


@dataclass
class Snapshot:
    """What the dashboard last read from Redis. ``tasks`` belong to ``tasks_for`` (queue, state,
    page, page size); ``processes``: (the open queue, how many durable processes it has);
    ``tenants``: (the open queue, the first page of its tenants with pending tasks);
    ``error`` is the last read's failure (None once a read succeeds again)."""

    queues: list[QueueInfo] = field(default_factory=list)
    servers: list[ServerInfo] = field(default_factory=list)
    tasks: list[TaskInfo] = field(default_factory=list)
    tasks_for: tuple[str, TaskState, int, int] | None = None
    processes: tuple[str, int] | None = None
    tenants: tuple[str, list[TenantInfo]] | None = None
    error: str | None = None
    updated: datetime | None = None


# ----------------------------------------------------------------------------------- formatting

def count(n: int) -> str:
    """A count in at most 4 characters: 999, 9.9k, 999k, 9.9M, 99M ..."""
    return _compact(n, 1000, "kMGTPE", "")


def _compact(n: int, base: int, units: str, plain: str) -> str:
    """``n`` in at most 4 characters with a unit per power of ``base``."""
    if n < 1000:
        return f"{n}{plain}"
    value = float(n)
    for unit in units:
        value /= base
        if value < 10:
            return f"{math.floor(value * 10) / 10:.1f}{unit}"
        if value < 1000:
            return f"{math.floor(value)}{unit}"
    return "many"


def per_second(x: float | None) -> str:
    """A rate in at most 4 characters ("-" when not known yet)."""
    if x is None:
        return "-"
    if x <= 0:
        return "0"
    if x < 10:
        return f"{x:.1f}"
    if x < 1000:
        return f"{x:.0f}"
    return count(int(x))


def size_bytes(n: int | None) -> str:
    """Bytes in at most 4 characters: 512B, 1.2K, 34M ("-" when unknown)."""
    return "-" if n is None else _compact(n, 1024, "KMGTPE", "B")


def duration(seconds: float) -> str:
    """A duration in at most 4 characters: 0.4s, 12s, 5m, 2h, 3d (the dashboard's fixed columns;
    listings use the more precise :func:`cli.common.duration`)."""
    s = max(0.0, seconds)
    if s < 10:
        return f"{s:.1f}s"
    for limit, div, unit in ((60, 1, "s"), (3600, 60, "m"), (86400, 3600, "h")):
        if s < limit:
            return f"{int(s // div)}{unit}"
    return f"{int(s // 86400)}d"


def relative(when: datetime | None, now: datetime) -> str:
    """'in 5m' or '12s ago' ('-' for None)."""
    if when is None:
        return "-"
    delta = (when - now).total_seconds()
    return f"in {duration(delta)}" if delta >= 0 else f"{duration(-delta)} ago"


# ------------------------------------------------------------------------------------ building

def _text(text: str, style: str = "") -> Text:
    """A line of text cut with an ellipsis rather than wrapped."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def _line(left: Text | str, right: Text | str, width: int) -> Text:
    """One line: ``left`` cut to fit, ``right`` flush right."""
    left = Text(left) if isinstance(left, str) else left
    right = Text(right) if isinstance(right, str) else right
    room = max(0, width - right.cell_len - 1) if right.cell_len else width
    left.truncate(room, overflow="ellipsis")
    gap = max(0, width - left.cell_len - right.cell_len)
    out = Text.assemble(left, " " * gap, right)
    out.truncate(width)
    out.no_wrap = True
    return out


@dataclass(frozen=True)
class Col:
    """A table column: fixed ``width``, or flexible (``ratio``) with ``min_width``."""

    header: str
    width: int | None = None
    ratio: int = 1
    min_width: int = 4
    right: bool = False


def _table(cols: Sequence[Col], rows: Sequence[Sequence[str | Text]], width: int) -> Table:
    t = Table(box=None, expand=True, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False,
              header_style="bold", width=width)
    for c in cols:
        t.add_column(c.header, width=c.width, ratio=None if c.width else c.ratio,
                     min_width=c.width or c.min_width, justify="right" if c.right else "left",
                     no_wrap=True, overflow="ellipsis")
    for row in rows:
        t.add_row(*row)
    return t


def _fit(needs: Sequence[int], room: int) -> list[int]:
    """Share ``room`` rows between sections needing ``needs`` rows, one at a time in turn, so a
    long section does not starve the others."""
    alloc = [0] * len(needs)
    while room > 0 and any(a < n for a, n in zip(alloc, needs)):
        for i, n in enumerate(needs):
            if room > 0 and alloc[i] < n:
                alloc[i] += 1
                room -= 1
    return alloc


def _clip(rows: list[list[str | Text]], room: int, ncols: int) -> list[list[str | Text]]:
    """At most ``room`` rows; when some are cut, the last shown row says how many."""
    if len(rows) <= room:
        return rows
    if room <= 0:
        return []
    more = len(rows) - (room - 1)
    return rows[: room - 1] + [[Text(f"… {more} more", style="dim")] + [""] * (ncols - 1)]


def _window(n: int, room: int, cursor: int) -> tuple[int, int]:
    """The rows [start, end) of ``n`` to show in ``room`` lines so that ``cursor`` is visible."""
    if n <= room:
        return 0, n
    start = min(max(0, cursor - room // 2), n - room)
    return start, start + room


# --------------------------------------------------------------------------------- queue table

QUEUE_COLS = [
    Col("queue", ratio=1, min_width=6), Col("state", 6), Col("size", 4, right=True),
    *(Col(h, 4, right=True) for h in ("pend", "actv", "schd", "rtry", "arch", "done")),
    Col("lat", 5, right=True), Col("ok/s", 4, right=True), Col("fail/s", 6, right=True),
    Col("mem", 4, right=True),
]
"""ok/s and fail/s: attempts that succeeded and that failed, per second over the last minute."""
HELD_COL = Col("wait", 4, right=True)
"""Tasks not runnable yet: waiting on their parents (``after=``) or behind their key (``key=``);
a column only while some queue has such tasks (the queue view's tabs tell them apart)."""
HELD_AT = 9
"""Where the wait column goes: after "done"."""
TENANTS_COL = Col("tnts", 4, right=True)
"""Tenants with pending tasks (docs/tenants.md); a column only while some queue has them (the
queue view's summary names the first ones)."""
WIDE_QUEUE_COLS = [Col("today ok", 8, right=True), Col("today fail", 10, right=True)]
WIDE = 110
"""From this width on, the queue table also shows today's succeeded and failed counts."""
NARROW_DROP = ["mem", "done", "tnts", "wait", "arch", "size", "lat", "fail/s", "rtry", "schd", "ok/s", "actv"]
"""Below 80 columns, queue table columns are left out in this order until the name has room."""
QUEUE_NAME_ROOM = 12


def held(q: QueueInfo) -> int:
    """The queue's tasks not runnable yet: waiting on their parents or behind their key."""
    return q.waiting + q.blocked


def _all_queue_cols(width: int, with_held: bool, with_tenants: bool = False) -> list[Col]:
    """The queue table's columns before any is left out for want of room."""
    cols = (QUEUE_COLS[:HELD_AT] + ([HELD_COL] if with_held else []) + ([TENANTS_COL] if with_tenants else [])
            + QUEUE_COLS[HELD_AT:])
    return cols + (WIDE_QUEUE_COLS if width >= WIDE else [])


def _queue_columns(width: int, with_held: bool = False, with_tenants: bool = False) -> list[int]:
    """Indexes of the queue table's columns that fit ``width``, the queue name getting at least
    :data:`QUEUE_NAME_ROOM` characters when it can."""
    cols = _all_queue_cols(width, with_held, with_tenants)
    keep = list(range(len(cols)))
    drop = iter(NARROW_DROP)

    def name_room() -> int:
        return width - sum((cols[i].width or 0) + 1 for i in keep[1:]) - 1

    while name_room() < QUEUE_NAME_ROOM:
        header = next(drop, None)
        if header is None:
            break
        keep = [i for i in keep if cols[i].header != header]
    return keep


def succeeded_today(q: QueueInfo) -> int:
    """Attempts that succeeded today (UTC): the processed counter counts failures too."""
    return max(0, q.processed_today - q.failed_today)


def _queue_row(q: QueueInfo, selected: bool, rates: Throughput, wide: bool,
               with_held: bool = False, with_tenants: bool = False) -> list[str | Text]:
    ok, failed = rates.rates(q.queue) or (None, None)
    name = Text(("› " if selected else "  ") + q.queue, style="reverse" if selected else "")
    row: list[str | Text] = [
        name, Text("paused", style="yellow") if q.paused else Text("run", style="green"), count(q.size),
        *(count(getattr(q, s.value)) for s in STATES),
        latency(q.pending, q.latency), per_second(ok),
        Text(per_second(failed), style="red" if failed else ""), size_bytes(q.memory_bytes),
    ]
    if with_tenants:
        row.insert(HELD_AT, count(q.tenants))
    if with_held:
        row.insert(HELD_AT, Text(count(held(q)), style="yellow" if held(q) else ""))
    if wide:
        row += [count(succeeded_today(q)), count(q.failed_today)]
    return row


STATUS_STYLE = {"quiet": "yellow", "stopping": "red"}
"""A server that is not simply running says so beside its name (asynqpy server quiet / stop)."""


def _server_name(s: ServerInfo) -> str | Text:
    if s.status == "running":
        return f"{s.host}:{s.pid}"
    return Text.assemble(f"{s.host}:{s.pid} ", (s.status, STATUS_STYLE.get(s.status, "")))


def _servers_rows(servers: Sequence[ServerInfo], now: datetime) -> list[list[str | Text]]:
    return [[_server_name(s), ",".join(f"{q}={w}" for q, w in sorted(s.queues.items())),
             f"{len(s.active)}/{s.concurrency}", duration((now - s.started).total_seconds())]
            for s in sorted(servers, key=lambda s: (s.host, s.pid))]


def _worker_rows(servers: Sequence[ServerInfo], now: datetime, wide: bool) -> list[list[str | Text]]:
    running = sorted(((w, s) for s in servers for w in s.active), key=lambda ws: ws[0].started)
    return [[w.type, w.queue, duration((now - w.started).total_seconds()), relative(w.deadline, now),
             w.task_id, f"{s.host}:{s.pid}" if wide else str(s.pid)] for w, s in running]


SERVER_COLS = [Col("server", ratio=2, min_width=10), Col("queues", ratio=3, min_width=8),
               Col("busy", 7, right=True), Col("up", 4, right=True)]
WORKER_COLS = [Col("task type", ratio=2, min_width=8), Col("queue", ratio=1, min_width=6),
               Col("running", 7, right=True), Col("deadline", 8, right=True), Col("id", 16)]
WORKER_SERVER = {False: Col("pid", 7, right=True), True: Col("server", ratio=1, min_width=8)}
"""The running tasks' last column: the server's pid, or host:pid on wide terminals."""


def queues_screen(state: DashState, snap: Snapshot, rates: Throughput, width: int, height: int,
                 now: datetime) -> list[RenderableType]:
    """Body of the queues view: the queue table, live servers and what they run."""
    wide = width >= WIDE
    servers = snap.servers
    workers = _worker_rows(servers, now, wide)
    show_servers, show_running, (rows_q, rows_s, rows_w) = _sections(height - 2, len(snap.queues), len(servers),
                                                                     len(workers))
    out = [_queue_table(state, snap, rates, width, rows_q, now)]
    if show_servers:
        out += _servers_part(servers, rows_s, width, now)
    if show_running:
        out += [Text(""), _line(Text.assemble(("Running ", "bold"), str(len(workers))), "", width),
                _table([*WORKER_COLS, WORKER_SERVER[wide]], _clip(workers, rows_w, len(WORKER_COLS) + 1), width)]
    return out


def _sections(body: int, queues: int, servers: int, workers: int) -> tuple[bool, bool, list[int]]:
    """Which sections of the queues view fit in ``body`` lines (the servers, then what they run:
    each only if it has room for its least), and the data rows each gets (queues, servers,
    running tasks)."""
    # lines that are not data rows, and the least each section needs to be worth showing
    queues_min = 1 + 1                                   # header, one row
    servers_min = 2 + (2 if servers else 0)              # blank, title (+ header, one row)
    running_min = 4 if workers else 0                    # blank, title, header, one row
    show_servers = body >= queues_min + servers_min
    show_running = show_servers and workers > 0 and body >= queues_min + servers_min + running_min
    chrome = 1 + (servers_min - (1 if servers else 0) if show_servers else 0) + (3 if show_running else 0)
    rows = _fit([max(1, queues), servers if show_servers else 0, workers if show_running else 0], body - chrome)
    return show_servers, show_running, rows


def _queue_table(state: DashState, snap: Snapshot, rates: Throughput, width: int, rows_q: int,
                 now: datetime) -> RenderableType:
    """The queue table: the columns that fit ``width``, the window of ``rows_q`` queues around the
    cursor (or a line saying there are none yet)."""
    if not snap.queues:
        return _text("no queues yet (a queue appears when a task is first enqueued to it)", "dim")
    wide = width >= WIDE
    with_held = any(held(q) for q in snap.queues)
    with_tenants = any(q.tenants for q in snap.queues)
    all_cols = _all_queue_cols(width, with_held, with_tenants)
    keep = _queue_columns(width, with_held, with_tenants)
    names = [q.queue for q in snap.queues]
    cursor = names.index(state.cursor) if state.cursor in names else 0
    start, end = _window(len(names), rows_q, cursor)
    rows = [[row[i] for i in keep] for row in
            (_queue_row(q, q.queue == state.cursor, rates, wide, with_held, with_tenants)
             for q in snap.queues[start:end])]
    return _table([all_cols[i] for i in keep], rows, width)


def _servers_part(servers: Sequence[ServerInfo], rows_s: int, width: int, now: datetime) -> list[RenderableType]:
    """The live servers' title (how many, busy/slots, how many quiet) and their table."""
    busy = sum(len(s.active) for s in servers)
    slots = sum(s.concurrency for s in servers)
    quiet = sum(s.status == "quiet" for s in servers)
    title = Text.assemble(("Servers ", "bold"), f"{len(servers)} live · busy {busy}/{slots}"
                          if servers else "none live", (f" · {quiet} quiet" if quiet else "", "yellow"))
    out: list[RenderableType] = [Text(""), _line(title, "", width)]
    if servers:
        out.append(_table(SERVER_COLS, _clip(_servers_rows(servers, now), rows_s, 4), width))
    return out


# --------------------------------------------------------------------------------- queue view

Cell = Callable[[TaskInfo, datetime], str | Text]


def _retried(t: TaskInfo, now: datetime) -> str:
    return retried(t.retried, t.max_retry)


def _payload(t: TaskInfo, now: datetime) -> str:
    return payload_text(t.payload, width=PREVIEW)


def _error(t: TaskInfo, now: datetime) -> str:
    return clip(t.last_error, False, PREVIEW)


def _lease(t: TaskInfo, now: datetime) -> Text:
    if t.orphaned:
        return Text("orphaned", style="bold red")
    return Text(relative(t.lease_until, now))


TASK_COLS: dict[TaskState, list[tuple[Col, Cell]]] = {
    TaskState.PENDING: [(Col("enqueued", 8, right=True), lambda t, now: relative(t.enqueued_at, now)),
                        (Col("retried", 7), _retried), (Col("payload", ratio=2), _payload)],
    TaskState.ACTIVE: [(Col("lease", 8, right=True), _lease),
                       (Col("deadline", 8, right=True), lambda t, now: relative(t.deadline, now)),
                       (Col("retried", 7), _retried),
                       (Col("progress", ratio=1), lambda t, now: payload_text(getattr(t, "progress", None),
                                                                             width=PREVIEW)),
                       (Col("payload", ratio=2), _payload)],
    TaskState.SCHEDULED: [(Col("due", 8, right=True), lambda t, now: relative(t.next_process_at, now)),
                          (Col("retried", 7), _retried), (Col("payload", ratio=2), _payload)],
    TaskState.RETRY: [(Col("next try", 8, right=True), lambda t, now: relative(t.next_process_at, now)),
                      (Col("retried", 7), _retried), (Col("last error", ratio=2), _error)],
    TaskState.ARCHIVED: [(Col("archived", 8, right=True),
                          lambda t, now: relative(t.archived_at or t.last_failed_at, now)),
                         (Col("retried", 7), _retried), (Col("last error", ratio=2), _error)],
    TaskState.COMPLETED: [(Col("done", 8, right=True), lambda t, now: relative(t.completed_at, now)),
                          (Col("result", ratio=2), lambda t, now: payload_text(t.result, width=PREVIEW))],
    TaskState.WAITING: [(Col("enqueued", 8, right=True), lambda t, now: relative(t.enqueued_at, now)),
                        (Col("parents", ratio=1), lambda t, now: clip(", ".join(
                            f"{p.id}:{p.state}" for p in t.parents), False, PREVIEW)),
                        (Col("payload", ratio=2), _payload)],
    TaskState.BLOCKED: [(Col("enqueued", 8, right=True), lambda t, now: relative(t.enqueued_at, now)),
                        (Col("key", ratio=1), lambda t, now: clip(t.key or "", False, PREVIEW)),
                        (Col("payload", ratio=2), _payload)],
}
"""Per state tab, the columns after id and type, and how each cell is made from a task."""


def _tabs(q: QueueInfo, current: TaskState, width: int) -> Text:
    for short in (False, True):
        parts = []
        for s in TABS:
            if s not in STATES and s is not current and not getattr(q, s.value):
                continue  # waiting / blocked: a tab only when the queue has such tasks (keys 7, 8 still go there)
            label = s.value if not short else _SHORT[s]
            parts.append((f"{label} {count(getattr(q, s.value))}", s is current))
        if sum(len(p) + 2 for p, _ in parts) <= width or short:
            break
    tabs = Text(no_wrap=True)
    for text, on in parts:
        tabs.append(f"[{text}]" if on else f" {text} ", style="reverse bold" if on else "")
    tabs.truncate(width, overflow="ellipsis")
    return tabs


_SHORT = {TaskState.PENDING: "pend", TaskState.ACTIVE: "actv", TaskState.SCHEDULED: "sched",
          TaskState.RETRY: "retry", TaskState.ARCHIVED: "arch", TaskState.COMPLETED: "done",
          TaskState.WAITING: "wait", TaskState.BLOCKED: "blkd"}


TENANTS_NAMED = 5
"""Tenants the queue view's summary names (the first ones by name, each with its pending tasks)."""


def _tenants_part(q: QueueInfo, tenants: Sequence[TenantInfo]) -> str:
    if not q.tenants:
        return ""
    named = ", ".join(f"{t.tenant} {count(t.pending)}" + (" paused" if t.paused else "")
                      + (f" w{t.weight}" if t.weight != 1 else "") for t in tenants[:TENANTS_NAMED])
    more = q.tenants - min(len(tenants), TENANTS_NAMED)
    return (f"  tenants {count(q.tenants)}" + (f": {named}" if named else "")
            + (f" +{count(more)}" if named and more > 0 else ""))


def queue_summary(q: QueueInfo, rates: Throughput, tenants: Sequence[TenantInfo] = ()) -> Text:
    ok, failed = rates.rates(q.queue) or (None, None)
    return Text.assemble(
        f"size {count(q.size)}  latency {latency(q.pending, q.latency)}  {per_second(ok)} ok/s  ",
        (f"{per_second(failed)} fail/s", "red" if failed else ""),
        _tenants_part(q, tenants),  # (before the day's counts: at 80 columns the end is cut)
        f"  today {count(succeeded_today(q))} ok {count(q.failed_today)} failed  mem {size_bytes(q.memory_bytes)}",
        (f"  trimmed {count(q.trimmed)}", "yellow") if q.trimmed else "",
        f"  aggregating {count(q.aggregating)} in {count(q.groups)} group(s)" if q.aggregating else "",
        f"  waiting {count(q.waiting)}" if q.waiting else "",
        f"  blocked {count(q.blocked)}" if q.blocked else "",
        no_wrap=True)


def queue_screen(state: DashState, snap: Snapshot, rates: Throughput, width: int, height: int,
                 now: datetime) -> list[RenderableType]:
    """Body of the queue view: a summary line, the state tabs and one page of tasks."""
    q = next((x for x in snap.queues if x.queue == state.queue), None)
    if q is None:
        return [_text(f"queue {state.queue!r} not found", "red")]
    summary = queue_summary(q, rates, snap.tenants[1] if snap.tenants and snap.tenants[0] == q.queue else ())
    summary.truncate(width, overflow="ellipsis")
    extra = TASK_COLS[state.tab]
    cols = [Col("id", 16), Col("type", ratio=1, min_width=8), *(c for c, _ in extra)]
    want = state.want()
    out: list[RenderableType] = [summary, _tabs(q, state.tab, width)]
    if snap.tasks_for != want:
        out.append(_text("loading…", "dim"))
    elif not snap.tasks:
        out.append(_text(f"no {state.tab.value} tasks" + (f" on page {state.page}" if state.page > 1 else ""), "dim"))
    else:
        rows = [[t.id, t.type, *(cell(t, now) for _, cell in extra)] for t in snap.tasks[: page_size_for(height)]]
        out.append(_table(cols, rows, width))
    return out


# ---------------------------------------------------------------------------------- help, frame

HELP = [
    ("↑ ↓  j k", "select a queue (Home/End: first/last)"),
    ("Enter", "open the selected queue"),
    ("← →  h l  1-8", "switch task state (queue view: ... waiting, blocked)"),
    ("n p  PgDn PgUp", "next / previous page of tasks"),
    ("Esc  Backspace", "back to the queue table"),
    ("Ctrl-L", "redraw the screen"),
    ("?", "this help (any key closes it)"),
    ("q  Ctrl-C", "quit"),
]
HELP_NOTES = [
    "size: tasks in every state. lat: age of the oldest pending task (- if none).",
    "ok/s, fail/s: attempts that succeeded / failed per second",
    "  over the last minute, from counters sampled at each refresh (- until two).",
    "retried: retries so far / most allowed.",
    "mem: the queue's approximate Redis memory, read every 30 s (- if unknown).",
    "wait: tasks waiting on their parents (after=) or behind their key (key=).",
    "tnts: tenants with pending tasks (tenant=).",
]


def help_screen(width: int, room: int) -> list[RenderableType]:
    """The keys, then notes on the columns, in at most ``room`` lines."""
    rows: list[list[str | Text]] = [[Text(k, style="bold"), v] for k, v in HELP[: max(0, room - 1)]]
    out: list[RenderableType] = [_table([Col("key", 16), Col("does", ratio=1)], rows, width)]
    notes = room - 1 - len(rows) - 1
    if notes > 0:
        out += [Text(""), *(_text(n) for n in HELP_NOTES[:notes])]
    return out


QUEUES_KEYS = "↑↓ select  Enter open  ? help  q quit"
QUEUE_KEYS = "←→ state  n/p page  Esc back  ? help  q quit"


def render(state: DashState, snap: Snapshot, rates: Throughput, *, width: int, height: int,
           now: datetime, source: str) -> RenderableType:
    """The whole screen: a title line, the current view, and a footer (keys, or the last error)."""
    if state.view is View.QUEUE and not state.help:
        title, body, keys, right = _queue_frame(state, snap, rates, width, height, now)
    else:
        title, body, keys, right = _queues_frame(state, snap, rates, width, height, now, source)
    header = _line(title, now.strftime("%H:%M:%S UTC"), width)
    if snap.error:
        footer = _line(Text(f"! {snap.error}", style="bold red"), "retrying", width)
    else:
        footer = _line(Text(keys, style="dim"), right, width)
    lines = [header, *body]
    used = sum(_height(r) for r in lines)
    filler = [Text("")] * max(0, height - 1 - used)
    return Group(*lines, *filler, footer)


Frame = tuple[Text, list[RenderableType], str, str]
"""A view's part of the screen: its title, its body, its footer's keys and its footer's right side."""


def _queue_frame(state: DashState, snap: Snapshot, rates: Throughput, width: int, height: int,
                 now: datetime) -> Frame:
    """The queue view: the queue's name (paused, its processes), its body, the page it is on."""
    q = next((x for x in snap.queues if x.queue == state.queue), None)
    procs = snap.processes[1] if snap.processes and snap.processes[0] == state.queue else 0
    title = Text.assemble(("asynqpy dash", "bold cyan"), " › ", (state.queue or "", "bold"),
                          (" (paused)", "yellow") if q is not None and q.paused else "",
                          f" · {count(procs)} process{'' if procs == 1 else 'es'}" if procs else "")
    n = pages(q, state.tab, state.page_size)
    return title, queue_screen(state, snap, rates, width, height, now), QUEUE_KEYS, f"page {min(state.page, n)}/{n}"


def _queues_frame(state: DashState, snap: Snapshot, rates: Throughput, width: int, height: int, now: datetime,
                  source: str) -> Frame:
    """The queues view (or the help over it): the Redis it shows, its body, how many queues."""
    title = Text.assemble(("asynqpy dash", "bold cyan"), f" {source}")
    body = help_screen(width, height - 2) if state.help else queues_screen(state, snap, rates, width, height, now)
    n = len(snap.queues)
    right = f"{n} queue{'' if n == 1 else 's'}" if n else ""
    return title, body, "any key: close help" if state.help else QUEUES_KEYS, right


def _height(r: RenderableType) -> int:
    if isinstance(r, Table):
        return len(r.rows) + (1 if r.show_header else 0)
    return 1
