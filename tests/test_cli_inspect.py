"""The inspection CLI (stats, queue, task, server) through click's runner against the real
redis-server: output content in 80 columns, --json parses, exit codes and one-line errors, URLs
with user:password and rediss:// (TLS)."""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from helpers import wait_sync
from redisproc import RedisProcess, free_port

from asynqpy import Client, Inspector, ServeMux, Server, Task
from asynqpy.cli.main import main
from asynqpy.core.spine.broker import Broker
from asynqpy.redisio.executor import SyncExecutor

pytestmark = pytest.mark.real


def run(url: str, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, [*args, "--redis-url", url])
    return res.exit_code, res.stdout, res.stderr


def ok(url: str, *args: str) -> str:
    code, out, err = run(url, *args)
    assert code == 0, (args, out, err)
    assert all(len(line) <= 80 for line in out.splitlines()), out  # fits an 80-column terminal
    assert all(line == line.rstrip() for line in out.splitlines()), [x for x in out.splitlines() if x != x.rstrip()]
    return out


def as_json(url: str, *args: str) -> Any:
    code, out, err = run(url, *args, "--json")
    assert code == 0, (args, out, err)
    return json.loads(out)


def fails(url: str, *args: str, message: str) -> None:
    code, out, err = run(url, *args)
    assert code == 2, (args, out, err)
    assert err.count("\n") == 1 and err.startswith("asynqpy: error: ") and message in err, err
    assert "Traceback" not in err


@pytest.fixture
def seeded(redis_url: str) -> Iterator[dict[str, str]]:
    """critical: 42 pending email tasks; default: 1 scheduled (bytes payload), 1 retry, 1
    archived, 1 completed (result), 1 active (leased by hand)."""
    b, x = Broker(), SyncExecutor(redis.Redis.from_url(redis_url))
    with Client(redis_url) as c:
        c.enqueue_many([("email:deliver", {"user_id": i, "template": "welcome-" + "x" * 40}) for i in range(42)],
                       queue="critical")
        ids = {"active": c.enqueue("slow", {"n": 1}, task_id="act-1").id}
        x.run(b.dequeue("default", 1, 60_000, "tok00000"))
        ids["scheduled"] = c.enqueue("image:resize", b"\x89PNG\r\n" + bytes(60), process_in=300).id
        ids["retry"] = c.enqueue("flaky", {"n": 2}, task_id="ret-1").id
        ids["archived"] = c.enqueue("doomed", {"n": 3}, task_id="arc-1").id
        ids["completed"] = c.enqueue("ok", None, task_id="done-1", retention=3600).id
    from asynqpy.core.model.codec import Message

    x.run(b.dequeue("default", 3, 60_000, "tok11111"))
    x.run(b.retry("default", "ret-1", "tok11111", Message("flaky", {"n": 2}, retried=1, last_error="Boom: x"), 60_000))
    x.run(b.archive("default", "arc-1", "tok11111", Message("doomed", {"n": 3}, last_error="Fatal: " + "y" * 200),
                    10_000, 86_400_000))
    x.run(b.complete("default", "done-1", "tok11111", Message("ok", retention_ms=3_600_000, result={"rows": 12})))
    yield ids


def test_stats_and_queue_commands(redis_url: str, seeded: dict[str, str]) -> None:
    u = redis_url
    ok(u, "queue", "pause", "critical")
    out = ok(u, "stats")
    assert "critical (paused)" in out and "42" in out and "Redis 7" in out and "processed 3 (1 succeeded, 2 failed: 66.7%)" in out
    rows = {r["queue"]: r for r in as_json(u, "stats")}
    assert rows["default"]["scheduled"] == 1 and rows["critical"]["size"] == 42 and rows["critical"]["paused"]
    assert ok(u, "queue", "ls").split() == ["critical", "default"]
    assert as_json(u, "queue", "ls") == ["critical", "default"]
    out = ok(u, "queue", "inspect", "default", "critical")
    assert "default (running)" in out and "critical (paused)" in out and "retry 1 · archived 1 · completed 1" in out
    [info] = as_json(u, "queue", "inspect", "default")
    assert (info["active"], info["failed_today"], info["trimmed"]) == (1, 2, 0) and info["memory_bytes"] > 0
    out = ok(u, "queue", "history", "default", "--days", "2")
    assert "66.7%" in out and out.count("\n") == 3
    hist = as_json(u, "queue", "history", "default")
    assert len(hist["default"]) == 7 and hist["default"][0]["processed"] == 3
    assert ok(u, "queue", "pause", "critical") == "queue critical was already paused\n"
    assert ok(u, "queue", "unpause", "critical") == "unpaused queue critical\n"
    assert not Inspector(u).queue_info("critical").paused
    fails(u, "queue", "rm", "critical", message="holds 42 task(s): empty it first or use --force")
    assert ok(u, "queue", "rm", "critical", "--force") == "removed queue critical\n"
    fails(u, "queue", "inspect", "critical", message="queue 'critical' not found")
    fails(u, "queue", "rm", "default", "--force", message="1 active task(s)")
    fails(u, "queue", "history", "nope", message="queue 'nope' not found")
    fails(u, "queue", "pause", "bad queue", message="invalid queue name")


def test_stats_skips_an_invalid_queue_set_member(redis_url: str, seeded: dict[str, str]) -> None:
    """`asynqpy stats` (and `queue ls`) used to fail on one bad member of asynqpy:queues."""
    import redis

    redis.Redis.from_url(redis_url).sadd("asynqpy:queues", "bad queue", b"\xff")
    assert [r["queue"] for r in as_json(redis_url, "stats")] == ["critical", "default"]
    out = ok(redis_url, "stats")
    assert "critical" in out and "bad queue" not in out
    assert ok(redis_url, "queue", "ls").split() == ["critical", "default"]


def test_task_ls_every_state_paging_full_and_json(redis_url: str, seeded: dict[str, str]) -> None:
    u = redis_url
    out = ok(u, "task", "ls", "-q", "critical", "-s", "pending", "--size", "10", "--page", "2")
    assert out.count("email:deliver") == 10 and '{"user_id": 10,' in out and "…" in out
    assert "pending 11-20 of 42 in queue critical · page 2" in out
    full = ok(u, "task", "ls", "-q", "critical", "-s", "pending", "--size", "1", "--full")
    assert "welcome-" + "x" * 20 in full.replace("\n", "").replace(" ", "")
    assert "no pending tasks in queue critical on page 9" in ok(u, "task", "ls", "-q", "critical", "-s", "pending",
                                                                "--page", "9")
    for state, needle in (("active", "act-1"), ("scheduled", "b'\\x89PNG"), ("retry", "Boom: x"),
                          ("archived", "Fatal: yyy"), ("completed", '{"rows": 12}')):
        out = ok(u, "task", "ls", "-q", "default", "-s", state)
        assert seeded[state] in out and needle in out, (state, out)
    tasks = as_json(u, "task", "ls", "-q", "default", "-s", "scheduled")
    assert tasks[0]["payload"]["base64"].startswith("iVBORw0K") and tasks[0]["state"] == "scheduled"
    assert len(as_json(u, "task", "ls", "-q", "critical", "-s", "pending", "--size", "1000")) == 42
    fails(u, "task", "ls", "-q", "default", "-s", "bogus", message="unknown task state 'bogus'")
    fails(u, "task", "ls", "-q", "critical", "--page", "99999999999999999999", message="page must be an int from 1 to")
    fails(u, "task", "ls", "-q", "nope", "-s", "pending", message="queue 'nope' not found")


def test_task_inspect_and_actions(redis_url: str, seeded: dict[str, str]) -> None:
    u = redis_url
    flat = "".join(ok(u, "task", "inspect", "-q", "default", "--id", "arc-1").split())  # rich wraps long text
    assert "statearchived" in flat and "typedoomed" in flat and "Fatal:yyy" in flat and "y" * 200 not in flat
    flat = "".join(ok(u, "task", "inspect", "-q", "default", "--id", "arc-1", "--full").split())
    assert "Fatal:" + "y" * 200 in flat
    info = as_json(u, "task", "inspect", "-q", "default", "--id", "done-1")
    assert info["state"] == "completed" and info["result"] == {"rows": 12}
    fails(u, "task", "inspect", "-q", "default", "--id", "nope", message="task 'nope' not found in queue 'default'")
    fails(u, "task", "delete", "-q", "default", "--id", "act-1", message="it is active (running): cancel it instead")
    fails(u, "task", "run", "-q", "critical", "--id", as_json(u, "task", "ls", "-q", "critical", "-s", "pending")[0]["id"],
          message="already pending")
    fails(u, "task", "archive", "-q", "default", "--id", "done-1", message="it is completed")
    assert ok(u, "task", "run", "-q", "default", "--id", "arc-1") == "moved to pending: task arc-1 (queue default)\n"
    assert ok(u, "task", "archive", "-q", "default", "--id", "ret-1") == "archived task ret-1 (queue default)\n"
    assert ok(u, "task", "delete", "-q", "default", "--id", "ret-1") == "deleted task ret-1 (queue default)\n"
    assert ok(u, "task", "archiveall", "-q", "critical", "-s", "pending") == \
        "archived 42 pending task(s) in queue critical\n"
    assert ok(u, "task", "runall", "-q", "critical", "-s", "archived") == \
        "moved to pending: 42 archived task(s) in queue critical\n"
    assert ok(u, "task", "deleteall", "-q", "critical", "-s", "pending") == \
        "deleted 42 pending task(s) in queue critical\n"
    fails(u, "task", "runall", "-q", "default", "-s", "pending", message="cannot run all pending tasks")
    fails(u, "task", "deleteall", "-q", "nope", "-s", "pending", message="queue 'nope' not found")


def test_task_cancel(redis_url: str, seeded: dict[str, str]) -> None:
    u = redis_url
    out = ok(u, "task", "cancel", "act-1")
    assert out == "cancelled task act-1 in queue default (archived; `task run` reruns it)\n"
    info = Inspector(u).task_info("default", "act-1")
    assert info.state.value == "archived" and info.last_error == "cancelled by an operator"
    fails(u, "task", "cancel", "act-1", "-q", "default", message="it is archived; only an active")
    fails(u, "task", "cancel", "nope", message="task 'nope' not found in any queue")


def test_server_ls(redis_url: str) -> None:
    assert ok(redis_url, "server", "ls") == "no live servers\n"
    assert as_json(redis_url, "server", "ls") == []
    mux = ServeMux()
    started = threading.Event()

    @mux.handle("slow")
    async def slow(task: Task) -> None:
        started.set()
        await asyncio.sleep(20)

    srv = Server(redis_url, queues={"default": 3, "low": 1}, concurrency=7, heartbeat_interval=0.2,
                 shutdown_timeout=0)
    t = threading.Thread(target=lambda: asyncio.run(srv.arun(mux)), daemon=True)
    t.start()
    try:
        with Client(redis_url) as c:
            id = c.enqueue("slow", timeout=60).id
        wait_sync(started.is_set, 10)
        insp = Inspector(redis_url)
        wait_sync(lambda: any(s.active for s in insp.servers()), 10)
        out = ok(redis_url, "server", "ls")
        assert "1/7" in out and "default=3, low=1" in out and id in out and "in 59s" in out
        [s] = as_json(redis_url, "server", "ls")
        assert s["concurrency"] == 7 and s["active"][0]["task_id"] == id and s["queues"] == {"default": 3, "low": 1}
    finally:
        srv.stop()
        t.join(15)


def test_unreachable_redis_for_every_command_group() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    for args in (["stats"], ["queue", "ls"], ["queue", "inspect", "q"], ["task", "ls", "-q", "q", "-s", "pending"],
                 ["task", "cancel", "x"], ["task", "deleteall", "-q", "q", "-s", "retry"], ["server", "ls"]):
        fails(url, *args, message="cannot reach Redis")


def test_user_and_password_in_the_url(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    r.acl_setuser("operator", enabled=True, passwords=["+s3cret"], keys=["*"], channels=["*"], commands=["+@all"])
    try:
        port = redis_url.rsplit(":", 1)[1].split("/")[0]
        with Client(redis_url) as c:
            c.enqueue("t", queue="acl")
        good = f"redis://operator:s3cret@127.0.0.1:{port}/0"
        assert "acl" in ok(good, "queue", "ls")
        fails(f"redis://operator:wrong@127.0.0.1:{port}/0", "queue", "ls", message="Redis refused the credentials")
    finally:
        r.acl_deluser("operator")


def _tls_files(d: Path) -> None:
    subj = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout",
                    str(d / "key.pem"), "-out", str(d / "cert.pem"), *subj], check=True, capture_output=True,
                   timeout=60)


def test_rediss_tls_url(tmp_path: Path) -> None:
    _tls_files(tmp_path)
    tls_port = free_port()
    server = RedisProcess("--tls-port", str(tls_port), "--tls-cert-file", str(tmp_path / "cert.pem"),
                          "--tls-key-file", str(tmp_path / "key.pem"), "--tls-ca-cert-file", str(tmp_path / "cert.pem"),
                          "--tls-auth-clients", "no")
    try:
        url = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={tmp_path / 'cert.pem'}"
        code, out, err = run(url, "enqueue", "t", "--queue", "secure")
        assert code == 0, err
        assert "secure" in ok(url, "stats")
        plain = f"redis://127.0.0.1:{tls_port}/0"  # a plain client on the TLS port does not get through
        code, _, err = run(plain, "queue", "ls")
        assert code == 2 and err.startswith("asynqpy: error:")
    finally:
        server.stop()


def test_no_trailing_spaces_in_inspect_output(redis_url: str, seeded: dict[str, str]) -> None:
    """rich pads table cells to the column's width: the end of every line is cut back."""
    for args in (("queue", "inspect", "default", "critical"), ("task", "inspect", "-q", "default", "--id", "arc-1"),
                 ("task", "inspect", "-q", "default", "--id", "done-1", "--full"), ("stats",),
                 ("task", "ls", "-q", "critical", "--size", "3"), ("queue", "history", "default")):
        out = ok(redis_url, *args)
        assert out.strip() and all(line == line.rstrip() for line in out.splitlines()), (args, out)


def test_task_ls_defaults_to_pending(redis_url: str, seeded: dict[str, str]) -> None:
    out = ok(redis_url, "task", "ls", "-q", "critical", "--size", "5")
    assert "pending 1-5 of 42 in queue critical" in out
    def ages(text: str) -> str:  # the two listings are read a moment apart: their ages may differ
        return re.sub(r"[0-9.]+[smhd] ago", "AGE", text)

    assert ages(out) == ages(ok(redis_url, "task", "ls", "-q", "critical", "-s", "pending", "--size", "5"))


def test_retries_are_shown_as_retried_n_of_max(redis_url: str, seeded: dict[str, str]) -> None:
    """A task that failed once has run twice: it shows as "retried 1/25" (retries so far out of the
    most allowed) in task ls and task inspect, as in the dashboard; never as "tries"."""
    out = ok(redis_url, "task", "ls", "-q", "default", "-s", "retry")
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["id", "type", "due", "retried"] and row.split()[4] == "1/25"
    out = ok(redis_url, "task", "inspect", "-q", "default", "--id", "ret-1")
    assert re.search(r"\nretried +1/25 \(retries so far / most allowed\)\n", out) and " tries" not in out


def test_latency_is_a_dash_without_pending_tasks_everywhere(redis_url: str, seeded: dict[str, str]) -> None:
    """stats, queue inspect and the dashboard show latency the same way: '-' when no task is
    pending, else seconds with one decimal (under a minute)."""
    from asynqpy.cli.common import latency
    from asynqpy.cli.dash_render import _queue_row
    from asynqpy.cli.dash_state import Throughput

    with Client(redis_url) as c:
        c.enqueue("t", None, queue="idle", process_in=600)
    rows = {line.split()[0]: line.split() for line in ok(redis_url, "stats").splitlines()[2:5]}
    assert rows["idle"][-1] == "-" and rows["default"][-1] == "-"
    assert rows["critical"][-1].endswith("s") and float(rows["critical"][-1][:-1]) < 60
    assert "latency    - (no pending task)" in ok(redis_url, "queue", "inspect", "idle")
    out = ok(redis_url, "queue", "inspect", "critical")
    assert re.search(r"latency    \d+\.\ds \(age of the oldest pending task\)", out), out
    with Inspector(redis_url) as insp:
        for info in insp.all_queue_info():
            assert str(_queue_row(info, False, Throughput(), False)[9]) == latency(info.pending, info.latency)
    assert [latency(0, 5.0), latency(3, 0.04), latency(3, 12.46), latency(3, 59.96), latency(3, 7300),
            latency(3, 12 * 86400)] == ["-", "0.0s", "12.5s", "1m00s", "2h01m", "12d"]


def test_long_queue_names_are_cut_not_the_headers(redis_url: str) -> None:
    long = "billing-service-invoice-retries-for-the-eu-region-" + "x" * 60
    with Client(redis_url) as c:
        c.enqueue("t", None, queue=long)
        c.enqueue("t", None, queue="default")
        c.pause(long)
    lines = ok(redis_url, "stats").splitlines()
    assert lines[1].split() == ["queue", "pending", "active", "scheduled", "retry", "archived", "completed", "latency"]
    row = next(line for line in lines if line.startswith("billing"))
    assert "…" in row and row.split()[1] == "(paused)" and row.split()[2:8] == ["1", "0", "0", "0", "0", "0"]
    assert next(line for line in lines if line.startswith("default")).split()[:2] == ["default", "1"]


def test_timeout_shows_server_default_and_none() -> None:
    """TaskInfo.timeout None is the server's default_timeout (never printed as -1), 0 is no limit."""
    from rich.console import Console

    from asynqpy.cli.common import show, timeout_text
    from asynqpy.cli.task import detail_table
    from asynqpy.core.model.codec import Message
    from asynqpy.core.model.task import TaskInfo, TaskState

    assert [timeout_text(t) for t in (None, -1.0, 0, 0.0, 30.0, 2.5)] == \
        ["server default", "server default", "none", "none", "30s", "2.5s"]
    info = TaskInfo.from_message("id1", "default", TaskState.PENDING, Message("t", None))
    for value, text in ((None, "server default"), (0.0, "none"), (90.0, "90s")):
        info.timeout = value
        buf = io.StringIO()
        show(Console(file=buf, width=80), detail_table(info, False))
        assert re.search(f"\ntimeout +{text}\n", buf.getvalue()) and "-1" not in buf.getvalue(), buf.getvalue()


def test_task_inspect_shows_the_last_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The traceback the library keeps with a failed task (TaskInfo.traceback) follows the fields,
    line for line, not folded."""
    import dataclasses

    from asynqpy.core.model.codec import Message
    from asynqpy.core.model.task import TaskInfo, TaskState

    if "traceback" not in {f.name for f in dataclasses.fields(TaskInfo)}:
        pytest.skip("this asynqpy keeps no traceback with a task yet")
    trace = ("Traceback (most recent call last):\n  File \"/srv/app/tasks.py\", line 12, in boom\n"
             "    helper({})\n  File \"/srv/app/tasks.py\", line 7, in helper\n    return d[\"missing\"]\n"
             "KeyError: 'missing'\n")
    info = TaskInfo.from_message("id1", "default", TaskState.ARCHIVED, Message("boom", None, last_error="KeyError: 'missing'"))
    info.traceback = trace  # type: ignore[attr-defined]
    monkeypatch.setattr(Inspector, "task_info", lambda self, queue, id: info)
    out = ok(f"redis://127.0.0.1:{free_port()}/0", "task", "inspect", "-q", "default", "--id", "id1")
    assert out.endswith("\ntraceback (last failed attempt)\n" + trace), out


def test_task_inspect_shows_headers(redis_url: str) -> None:
    with Client(redis_url) as c:
        id = c.enqueue("t", headers={"traceparent": "00-abc-01", "tenant": "acme"}, queue="hdr").id
    out = ok(redis_url, "task", "inspect", "-q", "hdr", "--id", id)
    assert re.search(r"\nheaders +traceparent=00-abc-01, tenant=acme\n", out), out
    shown = json.loads(ok(redis_url, "task", "inspect", "-q", "hdr", "--id", id, "--json"))
    assert shown["headers"] == {"traceparent": "00-abc-01", "tenant": "acme"}


def test_events_command(redis_url: str) -> None:
    with Client(redis_url) as c:
        a = c.enqueue("mail", {"to": 1}, queue="evq").id
        b = c.enqueue("sms", None, queue="evq", process_in=60).id
    lines = ok(redis_url, "events", "-q", "evq").splitlines()
    assert [ln.split()[3:6] for ln in lines] == [["enqueued", a, "mail"], ["scheduled", b, "sms"]], lines
    assert "due=" in lines[1]
    code, out, _ = run(redis_url, "events", "-q", "evq", "--json", "-e", "scheduled")  # JSON lines: no width limit
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0
    assert [(r["event"], r["task_id"], r["type"]) for r in rows] == [("scheduled", b, "sms")]
    assert ok(redis_url, "events", "-q", "evq", "-t", "nope") == ""
    assert ok(redis_url, "events", "-q", "evq", "--since", "2099-01-01T00:00:00") == ""
    assert ok(redis_url, "queue", "events", "evq") == \
        "queue evq: events on, about 10,000 kept (active events while followed)\n"
    assert ok(redis_url, "queue", "events", "evq", "--active") == \
        "queue evq: events on, about 10,000 kept (active events always)\n"
    assert ok(redis_url, "queue", "events", "evq", "--off") == "queue evq: events off\n"
    assert ok(redis_url, "events", "-q", "evq") == ""
    assert ok(redis_url, "queue", "events", "evq", "--max-len", "500", "--no-active") == \
        "queue evq: events on, about 500 kept (active events while followed)\n"
    fails(redis_url, "events", "--since", "yesterday", message="--since: 'yesterday' is neither")
    fails(redis_url, "queue", "events", "evq", "--on", "--off", message="give one of --max-len, --off, --on")
    fails(redis_url, "events", "-q", "bad{name}", message="invalid queue name")
    with Client(redis_url) as c:
        assert c.enqueue("mail", 2, queue="evq")  # nothing queued was lost to any of it
    assert Inspector(redis_url).queue_info("evq").size == 3


def test_stats_writes_many_rows_as_plain_text_in_the_tables_layout() -> None:
    """Past PLAIN_ROWS queues `asynqpy stats` writes the rows itself (rich lays out a table at
    about 1 ms a row): the same characters as rich's table, in a terminal (bold header) or not,
    with the memory column or not, names cut to the width or not."""
    from datetime import datetime, timezone

    from rich.console import Console

    from asynqpy import QueueInfo
    from asynqpy.cli.common import show
    from asynqpy.cli.stats import PLAIN_ROWS, queue_table, show_queue_table

    def info(i: int) -> QueueInfo:
        n = (0, 1, 12, 12345, 10**7)[i % 5]
        return QueueInfo(("q", "default", "a-very-long-queue-name-" * 3, "x.y:z")[i % 4] + str(i), n, n, i % 3, 0,
                         1, 99999 * (i % 2), 0, i % 7 == 0, (0.0, 1.5, 125.0, 99999.0)[i % 4], 0, 0, 0, 0,
                         (None, 123, 10**9)[i % 3], datetime.now(timezone.utc))

    rows = [info(i) for i in range(PLAIN_ROWS + 3)]
    for width, terminal, memory in ((80, False, False), (120, True, True), (200, False, True), (60, True, False)):
        consoles = [Console(file=io.StringIO(), width=width, force_terminal=terminal, highlight=False,
                            soft_wrap=False) for _ in range(2)]
        show(consoles[0], queue_table(rows, width, memory))
        show_queue_table(consoles[1], rows, memory)
        rich_text, plain = (c.file.getvalue() for c in consoles)  # type: ignore[attr-defined]
        assert plain == rich_text and plain.count("\n") == len(rows) + 1
