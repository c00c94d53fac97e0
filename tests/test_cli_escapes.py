"""Issue 42 #18: stored text reaches the operator's terminal only escaped. A payload, a type, a
handler's error and logs, a result, a tenant and headers holding terminal escape sequences (and C1
and bidirectional controls) are driven through the commands that show them (task ls and inspect,
events, the tenants table, stats, cron ls, their --json, the dashboard's screens): no control
character but newline and tab is printed; --json stays JSON and gives the text back unchanged."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from asynqpy import Client, ServeMux, Task
from asynqpy.cli.main import main
from asynqpy.testing import drain

pytestmark = pytest.mark.real

EVIL = "ACME\x1b]0;owned\x07\x1b[2J\x1b[H\x1b]52;c;ZWNobw==\x07\r\x9b31m\u202eevil\x7f done\x1b[8m"
Q = "esc"
SAFE = {"\n", "\t"}


def run(url: str, *args: str) -> str:
    res = CliRunner().invoke(main, [*args, "--redis-url", url])
    assert res.exit_code == 0, (args, res.output)
    return res.stdout


CONTROLS = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x202E)} - SAFE


def raw_controls(text: str) -> list[str]:
    """The control characters (and a bidi override) of ``text`` that a terminal would act on."""
    return sorted(set(text) & CONTROLS)


@pytest.fixture
def evil(redis_url: str) -> str:
    redis.Redis.from_url(redis_url).flushdb()
    mux = ServeMux()

    @mux.handle("order")
    def order(task: Task) -> Any:
        task.log(f"processing order for {task.payload['customer']}")
        if task.payload["fail"]:
            raise ValueError(f"unknown customer {task.payload['customer']}")
        return {"customer": task.payload["customer"]}

    with Client(redis_url) as c:
        c.enqueue("order", {"customer": EVIL, "fail": True}, queue=Q, task_id="o1", max_retry=0, tenant="acme",
                  headers={"h": EVIL})
        c.enqueue("order", {"customer": EVIL, "fail": False}, queue=Q, task_id="o2", retention=3600)
    drain(mux, redis_url, queues=[Q], raise_on_failure=False, timeout=20, capture_logs=True)
    with Client(redis_url) as c:
        c.enqueue("order", EVIL, queue=Q, task_id="o3", tenant="acme")  # pending
        c.enqueue("order", "[link=https://evil.example]click[/link] [red]R[/red]", queue=Q, task_id="o4")
    return redis_url


def test_every_command_escapes_stored_text(evil: str) -> None:
    u = evil
    outputs = {
        "task inspect o1": run(u, "task", "inspect", "o1", "-q", Q, "--full"),
        "task inspect o2": run(u, "task", "inspect", "o2", "-q", Q),
        "task inspect o3": run(u, "task", "inspect", "o3", "-q", Q),
        "task ls archived": run(u, "task", "ls", "-q", Q, "-s", "archived", "--full"),
        "task ls completed": run(u, "task", "ls", "-q", Q, "-s", "completed"),
        "task ls pending": run(u, "task", "ls", "-q", Q, "-s", "pending", "--full"),
        "events": run(u, "events", "-q", Q),
        "queue tenants": run(u, "queue", "tenants", Q),
        "stats": run(u, "stats"),
    }
    for name, out in outputs.items():
        assert not raw_controls(out), (name, raw_controls(out), out)
    for name in ("task ls pending", "task inspect o4"):  # rich markup in stored text stays text
        out = outputs.get(name) or run(u, "task", "inspect", "o4", "-q", Q)
        assert "[link=https://evil.example]click[/link] [red]R[/red]" in out, out
    assert "\\x1b]52;c;" in outputs["task inspect o1"]  # shown, escaped: the logs, the error, the payload
    assert "processing order for ACME\\x1b]0;owned" in outputs["task inspect o1"]
    for args in (("task", "inspect", "o1", "-q", Q), ("task", "ls", "-q", Q, "-s", "pending"), ("events", "-q", Q)):
        out = run(u, *args, "--json")
        assert not raw_controls(out), (args, raw_controls(out))
        assert EVIL in out.replace("\\u009b", "\x9b").replace("\\u202e", "\u202e").replace("\\u007f", "\x7f") \
            .replace("\\u001b", "\x1b").replace("\\u0007", "\x07").replace("\\r", "\r") \
            or EVIL in json.dumps([json.loads(line) for line in out.splitlines()] if args[0] == "events"
                                  else json.loads(out), ensure_ascii=False)
    info = json.loads(run(u, "task", "inspect", "o1", "-q", Q, "--json"))
    assert info["payload"]["customer"] == EVIL and info["headers"]["h"] == EVIL  # the JSON gives the text back


def test_the_console_escapes_what_it_renders_but_its_own_styles() -> None:
    """The one place (cli/common.py visible, through console()): a Text built by hand (as the
    dashboard's screens are) and a table cell are escaped; rich's own style codes still work."""
    from rich.table import Table
    from rich.text import Text

    from asynqpy.cli.common import console

    buf = io.StringIO()
    out = console(file=buf, force_terminal=True, color_system="standard", width=200)
    t = Table("a")
    t.add_row(EVIL)
    out.print(t)
    out.print(Text(EVIL, style="red"))
    out.print("[bold]ok[/bold]", markup=True)  # (the CLI's own markup: asked for)
    text = buf.getvalue()
    assert "\x1b]" not in text and "\x1b[2J" not in text and "\x9b" not in text and "\u202e" not in text
    assert "\x1b[1mok" in text and "\\x1b]52;c;" in text  # bold still bold; the payload's escapes shown


def test_the_dashboard_screens_escape_stored_text() -> None:
    """The dashboard's queue view (a task's type, payload and error; the queue's tenants) on the
    console the dashboard runs on (cli/dash.py: console())."""
    from dataclasses import replace
    from datetime import datetime, timezone

    from asynqpy import QueueInfo
    from asynqpy.cli.common import console
    from asynqpy.cli.dash_render import Snapshot, page_size_for, render
    from asynqpy.cli.dash_state import DashState, Throughput, View
    from asynqpy.core.model.codec import Message
    from asynqpy.core.model.task import TaskInfo, TaskState
    from asynqpy.core.tenants.plans import TenantInfo

    now = datetime.now(timezone.utc)
    queue = replace(QueueInfo(Q, 1, 1, 0, 0, 0, 0, 0, False, 0.0, 0, 0, 0, 0, None, now), tenants=1)
    task = TaskInfo.from_message("o1", Q, TaskState.PENDING, Message("t\x1b[2J", EVIL, last_error=EVIL), 0)
    state = DashState(cursor=Q, view=View.QUEUE, queue=Q)
    state.page_size = page_size_for(30)
    snap = Snapshot(queues=[queue], tasks=[task], tasks_for=(Q, TaskState.PENDING, 1, state.page_size),
                    tenants=(Q, [TenantInfo(EVIL, 1)]), updated=now)
    buf = io.StringIO()
    out = console(file=buf, force_terminal=True, width=160, height=30)
    out.print(render(state, snap, Throughput(), width=160, height=30, now=now, source="redis://x"))
    text = buf.getvalue()
    assert "\x1b]" not in text and "\x1b[2J" not in text and not [c for c in text if c in "\x07\x9b\u202e"]
    assert "ACME\\x1b" in text or "ACME\\x1b" in text.replace("\n", "")  # the payload, shown escaped


LABELS = {  # TaskInfo field -> the label `task inspect` shows it under (README: "every field")
    "id": "id", "queue": "queue", "type": "type", "payload": "payload", "state": "state", "max_retry": "retried",
    "retried": "retried", "last_error": "last error", "last_failed_at": "last failed", "next_process_at": "next run",
    "completed_at": "completed", "result": "result", "timeout": "timeout", "deadline": "deadline",
    "retention": "retention", "enqueued_at": "enqueued", "lease_until": "lease until", "orphaned": "ORPHANED",
    "archived_at": "archived", "headers": "headers", "progress": "progress", "group": "group",
    "priority": "priority", "replaced": "replaced", "workers": "workers", "runs_wanted": "runs", "runs": "run on",
    "run_results": "run on", "parents": "parents", "children": "children", "on_parent_failure": "on parent failure",
    "key": "key", "held": "held", "min_worker_version": "min worker version", "tenant": "tenant",
    "logs": None, "traceback": None,  # (after the fields: show_logs, and the traceback's own block)
}


def test_task_inspect_shows_every_field() -> None:
    """Issue 42: `task inspect` hid ``held`` and ``min_worker_version`` (and ``key``, ``replaced``);
    a field added to TaskInfo must be given a label here, and shown."""
    import dataclasses
    from datetime import datetime, timedelta, timezone

    from rich.console import Console

    from asynqpy.cli.task import detail_table
    from asynqpy.core.model.task import TaskInfo, TaskState
    from asynqpy.core.workflows.records import ParentEnd

    assert set(LABELS) == {f.name for f in dataclasses.fields(TaskInfo)}, "label the new TaskInfo field"
    now = datetime.now(timezone.utc)
    info = TaskInfo(
        "t1", Q, "order", {"a": 1}, TaskState.COMPLETED, 3, 1, last_error="boom", last_failed_at=now,
        next_process_at=now + timedelta(hours=1), completed_at=now, result={"ok": 1}, timeout=5.0,
        deadline=now, retention=60.0, enqueued_at=now, lease_until=now, orphaned=True, archived_at=now,
        headers={"h": "v"}, progress=0.5, group="g", priority=7, replaced="t0", workers=["w1"], runs_wanted=2,
        runs={"w1": "succeeded"}, run_results={"w1": 1}, parents=[ParentEnd(Q, "p1", "completed")],
        children=[(Q, "c1")], on_parent_failure="cancel", key="acct-1", held="version",
        min_worker_version="2.0.0", tenant="acme")
    out = Console(width=200, file=io.StringIO(), record=True)
    out.print(detail_table(info, full=True))
    text = out.export_text()
    shown = {line.split("  ")[0].strip() for line in text.splitlines()}
    for field_name, label in LABELS.items():
        if label is not None:
            assert label in text, (field_name, label, text)
    assert {"held", "min worker version", "key", "replaced"} <= shown, shown
    assert "2.0.0 or newer" in text


def test_the_workers_text_log_lines_escape_stored_text() -> None:
    """`asynqpy worker` logs a failed task's error (the handler's text, often the payload's) to the
    terminal: its text format escapes control characters the same way (core/humanize visible);
    a traceback keeps its line breaks."""
    import logging

    from asynqpy.worker.logs import TEXT_FORMAT, TextFormatter

    try:
        raise ValueError(EVIL)
    except ValueError:
        import sys

        exc_info = sys.exc_info()
    record = logging.LogRecord("asynqpy.processor", logging.WARNING, __file__, 1,
                               "task failed: id=%s error=%s", ("o1", EVIL), exc_info)
    line = TextFormatter(TEXT_FORMAT).format(record)
    assert not raw_controls(line), raw_controls(line)
    assert "error=ACME\\x1b]0;owned" in line and "\nTraceback" in line
