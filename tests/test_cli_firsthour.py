"""First-hour problems of the CLI (issue 29 item 26), through click's runner against the real
redis-server: events --since and --at read a naive time alike, -e takes every event the stream
emits in any case, --follow starts now, -s takes a state in any case, cron ls/history fit 80
columns, cron history finds an entry in any queue, a wrong password is an AsynqpyError."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import wait_sync

from asynqpy import Client, Inspector
from asynqpy.cli.main import main

pytestmark = pytest.mark.real


def run(url: str, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, [*args, "--redis-url", url])
    return res.exit_code, res.stdout, res.stderr


def ok(url: str, *args: str) -> str:
    code, out, err = run(url, *args)
    assert code == 0, (args, out, err)
    assert all(len(line) <= 80 for line in out.splitlines()), out  # fits an 80-column terminal
    return out


def fails(url: str, *args: str, message: str) -> None:
    code, out, err = run(url, *args)
    assert code == 2, (args, out, err)
    assert err.count("\n") == 1 and err.startswith("asynqpy: error: ") and message in err, err


def test_events_since_reads_a_naive_time_as_local_time_like_at(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """--since 2026-05-01T09:30 was UTC while enqueue --at 2026-05-01T09:30 was local time. Both
    are local time now: in a zone 10 hours ahead, a naive --since of the local clock's 'now' shows
    the events from now on, not those of the last 10 hours as well (nor none, 10 hours behind)."""
    monkeypatch.setenv("TZ", "Etc/GMT-10")  # UTC+10
    time.tzset()
    try:
        with Client(redis_url) as c:
            c.enqueue("t", None, queue="evq")
        local_now = datetime.now().replace(microsecond=0)  # naive, local (UTC+10)
        before = (local_now - timedelta(minutes=5)).isoformat()
        after = (local_now + timedelta(minutes=5)).isoformat()
        assert "enqueued" in ok(redis_url, "events", "-q", "evq", "--since", before)
        assert ok(redis_url, "events", "-q", "evq", "--since", after) == ""  # as UTC it was 10 h ago: all shown
        utc_before = (datetime.utcnow() - timedelta(minutes=5)).replace(microsecond=0).isoformat() + "Z"
        assert "enqueued" in ok(redis_url, "events", "-q", "evq", "--since", utc_before)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_events_filter_takes_every_event_the_stream_emits_in_any_case(redis_url: str) -> None:
    """-e waiting was refused ('not one of enqueued, ...') though the stream emits it; so were
    blocked and process_removed; -e Archived was refused for its case."""
    with Client(redis_url) as c:
        parent = c.enqueue("p", None, queue="evw", process_in=3600)
        c.enqueue("child", None, queue="evw", after=[parent])
        c.enqueue("k", None, queue="evw", key="acct-1")
        c.enqueue("k", None, queue="evw", key="acct-1")  # behind the first: blocked
    out = ok(redis_url, "events", "-q", "evw", "-e", "waiting")
    assert out.count("\n") == 1 and " waiting " in out and " child" in out, out
    out = ok(redis_url, "events", "-q", "evw", "-e", "Blocked")
    assert out.count("\n") == 1 and " blocked " in out, out
    assert ok(redis_url, "events", "-q", "evw", "-e", "process_removed") == ""
    code, _, err = run(redis_url, "events", "-e", "nope")
    assert code == 2 and "'nope' is not one of" in err and "'waiting'" in err, err


def test_events_follow_without_since_starts_now(redis_url: str) -> None:
    """--follow without --since first printed every event kept (10 000 by default) before the
    new ones; it now prints only what happens after it starts."""
    import subprocess
    import sys

    with Client(redis_url) as c:
        c.enqueue("old", None, queue="evf")
        proc = subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "events", "-q", "evf", "--follow",
                                 "--redis-url", redis_url], stdout=subprocess.PIPE, text=True)
        try:
            lines: list[str] = []
            reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),  # type: ignore[union-attr]
                                      daemon=True)
            reader.start()

            def fresh_seen() -> bool:
                c.enqueue("new", None, queue="evf")  # until the follower (started at some point) sees one
                return any(" new" in x for x in lines)

            wait_sync(fresh_seen, 20)
        finally:
            proc.terminate()
            proc.wait(10)
    assert not any(" old" in x for x in lines), lines
    assert "enqueued" in ok(redis_url, "events", "-q", "evf", "--since", "1h")  # --since still reads back


def test_task_states_are_read_in_any_case(redis_url: str) -> None:
    """-s Archived was 'unknown task state'."""
    with Client(redis_url) as c:
        c.enqueue("t", None, queue="sq", task_id="one")
    assert "one" in ok(redis_url, "task", "ls", "-q", "sq", "-s", "Pending")
    assert "one" in ok(redis_url, "task", "ls", "-q", "sq", "-s", " PENDING ")
    assert Inspector(redis_url).list_tasks("sq", "Pending")[0].id == "one"


def test_a_wrong_password_is_an_asynqpy_error(redis_url: str) -> None:
    """``except AsynqpyError`` missed a wrong password: redis-py's AuthenticationError came through
    as it was. It is now a RedisAuthError (an AsynqpyError, and still an AuthenticationError), from
    the Client, the AsyncClient and the Inspector; the CLI's line is unchanged."""
    import asyncio

    import redis
    from redis.exceptions import AuthenticationError

    from asynqpy import AsyncClient, AsynqpyError, RedisAuthError

    r = redis.Redis.from_url(redis_url)
    r.acl_setuser("producer", enabled=True, passwords=["+s3cret"], keys=["*"], channels=["*"], commands=["+@all"])
    try:
        port = redis_url.rsplit(":", 1)[1].split("/")[0]
        wrong = f"redis://producer:wrong@127.0.0.1:{port}/0"
        with pytest.raises(AsynqpyError) as caught, Client(wrong) as c:
            c.enqueue("t", None)
        assert isinstance(caught.value, RedisAuthError) and isinstance(caught.value, AuthenticationError)
        assert str(caught.value).startswith("Redis refused the credentials") and "wrong" not in str(caught.value)

        async def produce() -> None:
            async with AsyncClient(wrong) as ac:
                await ac.enqueue("t", None)

        with pytest.raises(RedisAuthError):
            asyncio.run(produce())
        with pytest.raises(RedisAuthError), Inspector(wrong) as insp:
            insp.task_info("default", "x")
        fails(wrong, "enqueue", "t", message="Redis refused the credentials")
        assert r.dbsize() == 0
    finally:
        r.acl_deluser("producer")


def test_cron_commands_find_an_entry_in_any_queue_and_fit_80_columns(redis_url: str) -> None:
    """`cron history NAME` (and pause, resume, rm, run-now) looked only in queue 'default' unless
    given -q, while `task cancel` looks in every queue; `cron ls` and `cron history` folded their
    cells over several lines in 80 columns."""
    with Inspector(redis_url) as insp:
        insp.cron_add("nightly-report-for-accounting", "myproject.tasks.reports.build_nightly_report",
                      cron="30 2 * * *", tz="Europe/Berlin", queue="maintenance")
        insp.cron_add("heartbeat", "ops.ping", every=5, queue="ops")
        insp.cron_add("heartbeat", "ops.ping", every=5, queue="ops2")  # the same name in two queues
        insp.cron_run_now("nightly-report-for-accounting", "maintenance")
    name = "nightly-report-for-accounting"
    out = ok(redis_url, "cron", "history", name)
    assert out.count("\n") == 2 and "(run now)" in out and f"cron:{name}:now:" in out, out
    out = ok(redis_url, "cron", "ls")
    assert out.count("\n") == 4, out  # a header and one line per entry
    assert "nightly-report" in out and "30 2 * * * (Europ" in out and " maintenance " in out and " ops2 " in out
    assert "myproject.tasks" in out and "next (UTC)" in out, out
    full = run(redis_url, "cron", "ls", "--full")[1]
    assert full.count("\n") == 4 and "myproject.tasks.reports.build_nightly_report" in full, full  # whole cells
    assert f"cron:{name}:now:" in full and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", full), full
    assert ok(redis_url, "cron", "pause", name) == f"paused entry {name} of queue maintenance\n"
    assert ok(redis_url, "cron", "resume", name, "-q", "maintenance") == f"resumed entry {name}\n"
    fails(redis_url, "cron", "pause", "heartbeat", message="'heartbeat' are in queues ops, ops2: give -q QUEUE")
    fails(redis_url, "cron", "pause", name, "heartbeat", message="give -q QUEUE")
    assert not any(i.paused for i in Inspector(redis_url).scheduler_entries())  # refused whole: nothing paused
    assert ok(redis_url, "cron", "rm", "heartbeat", "-q", "ops2") == "removed entry heartbeat\n"
    assert ok(redis_url, "cron", "history", "heartbeat").startswith("tick (UTC)")  # in one queue now: found
    fails(redis_url, "cron", "history", "nope", message="no scheduler entry 'nope' in any queue")


def test_log_success_logs_each_success_at_info(redis_url: str, tmp_path: Any) -> None:
    """Success lines existed only at DEBUG, which also turned on redis-py's debug lines; with
    --log-success each success is one INFO line, and nothing at DEBUG is printed. (The line is
    logged before the completion is written, so once the task counts as processed it is there.)"""
    import subprocess
    import sys

    from helpers import ROOT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    with Client(redis_url) as c, Inspector(redis_url) as insp:
        for n, flags in enumerate((["--log-success"], [])):
            log = tmp_path / f"worker{n}.log"
            with open(log, "wb") as out:
                w = subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "worker", "workers:mux", "--redis-url",
                                      redis_url, *flags], env=env, stdout=out, stderr=subprocess.STDOUT,
                                     cwd=str(ROOT / "tests"))
            try:
                c.enqueue("noop", None)
                wait_sync(lambda: insp.queue_info("default").processed_total == n + 1, 20)
            finally:
                w.terminate()
                w.wait(20)
            text = log.read_text()
            lines = [x for x in text.splitlines() if "task succeeded in" in x]
            if flags:
                assert len(lines) == 1 and " INFO " in lines[0] and "type=noop" in lines[0], text
                assert " DEBUG " not in text, text
            else:
                assert lines == [], text


def test_server_ls_shows_quiet_as_soon_as_the_quiet_is_acknowledged(redis_url: str) -> None:
    """`server quiet` answered 'quiet' but `server ls` showed 'running' until the next heartbeat
    rewrote the description (seconds later with the default interval). The server now writes it
    before acknowledging. A long heartbeat interval shows the difference."""
    import asyncio

    from helpers import serving, until

    from asynqpy import ServeMux

    async def main_() -> None:
        async with serving(redis_url, ServeMux(), queues=["ctl2"], name="deploy-8", heartbeat_interval=30,
                           lease=120) as server:
            with Inspector(redis_url) as insp:
                await until(lambda: any(s.id == server.server_id for s in insp.servers()), 10)
                for action, status in (("quiet", "quiet"), ("resume", "running"), ("quiet", "quiet")):
                    code, out, err = await asyncio.to_thread(run, redis_url, "server", action, "deploy-8")
                    assert (code, out) == (0, f"server {server.server_id}: {status}\n"), (out, err)
                    [s] = [s for s in insp.servers() if s.id == server.server_id]
                    assert s.status == status  # at once, not at the next heartbeat (30 s away)
                    assert status in ok(redis_url, "server", "ls")

    asyncio.run(main_())


def test_the_readme_install_section_names_every_extra_as_a_local_install() -> None:
    """The Install section left out [pytest], [rules] and [memory], and docs said
    pip install 'asynqpy[x]' (a PyPI name; the package is installed from a clone)."""
    from helpers import ROOT

    table = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^(\w+) = \[", table, re.MULTILINE)) - {"docs"}
    assert {"pytest", "rules", "memory", "cron", "web"} <= extras, extras
    readme = (ROOT / "README.md").read_text()
    install = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    missing = [x for x in sorted(extras) if f"'.[{x}]'" not in install]
    assert missing == [], missing
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pypi = [f"{p.name}: {line.strip()}" for p in docs for line in p.read_text().splitlines()
            if re.search(r"pip install '?asynqpy\[", line)]
    assert pypi == [], pypi


def test_the_names_of_processes_workers_are_as_documented(redis_url: str) -> None:
    """The README said the processes of --processes N share the worker's name; without --name each
    is host:<its pid> (a worker of its own), with --name they share it, as the docs now say."""
    import socket
    import subprocess
    import sys

    from helpers import ROOT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    with Inspector(redis_url) as insp:
        for extra in ([], ["--name", "web-1"]):
            sup = subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "--log-level", "WARNING", "worker",
                                    "workers:mux", "--processes", "2", "--redis-url", redis_url, *extra], env=env,
                                   cwd=str(ROOT / "tests"))
            try:
                wait_sync(lambda: len(insp.servers()) == 2, 30)
                servers = insp.servers()
            finally:
                sup.terminate()
                sup.wait(30)
            names = sorted(s.name for s in servers)
            if extra:
                assert names == ["web-1", "web-1"], names
            else:
                assert names == sorted(f"{socket.gethostname()}:{s.pid}" for s in servers) and len(set(names)) == 2
            wait_sync(lambda: insp.servers() == [], 30)
    server_page = (ROOT / "docs" / "server.md").read_text()
    assert "without one each is `host:<its own pid>`" in server_page


def test_queue_typos_are_warned_about_with_did_you_mean(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A worker started with --queues critcal waited on an empty queue without a word, and
    `enqueue -q critcal` put a task where no worker looks. The worker now warns at start about a
    served queue that never had a task and is close to one that has; the CLI's enqueue warns (on
    stderr, the task enqueued all the same) when workers run and none serves the queue."""
    import asyncio
    import logging

    from helpers import serving, until

    from asynqpy import ServeMux

    with Client(redis_url) as c:
        c.enqueue("t", None, queue="critical")

    mux = ServeMux()
    mux.handle("t", lambda task: None)

    async def main_() -> None:
        with caplog.at_level(logging.WARNING, logger="asynqpy"):
            async with serving(redis_url, mux, queues=["critcal", "low"], heartbeat_interval=0.2) as server:
                with Inspector(redis_url) as insp:
                    await until(lambda: any(s.id == server.server_id for s in insp.servers()), 10)
                # the worker's check of its queue names runs just after its first fetch (server.py
                # LOOPS_DELAY): wait for it before the CLI runs here in this process (it takes over
                # stderr and the log handlers while it runs)
                await until(lambda: any("did you mean" in r.getMessage() for r in caplog.records), 10)
                code, out, err = await asyncio.to_thread(run, redis_url, "enqueue", "t", "-q", "critical")
                assert code == 0 and out.startswith("enqueued ") and out.count("\n") == 1, (out, err)
                assert err == "asynqpy: warning: no running worker serves queue 'critical'; did you mean 'critcal'?\n"
                code, out, err = await asyncio.to_thread(run, redis_url, "enqueue", "t", "-q", "low")
                assert code == 0 and err == "", err  # served: nothing to say
                code, out, err = await asyncio.to_thread(run, redis_url, "enqueue", "t", "-q", "zzz", "--json")
                assert code == 0 and json.loads(out)["queue"] == "zzz", out  # stdout stays JSON
                assert err == "asynqpy: warning: no running worker serves queue 'zzz' (they serve critcal, low)\n"

    asyncio.run(main_())
    warned = [r.getMessage() for r in caplog.records if "did you mean" in r.getMessage()]
    assert warned == ["queue 'critcal' has never had a task, did you mean 'critical'? (this server serves critcal, "
                      "low)"], warned
    assert Inspector(redis_url).queue_info("critical").pending == 2  # both enqueued


def test_task_commands_take_the_id_as_an_argument_and_find_its_queue(redis_url: str) -> None:
    """`task inspect` (tree, edit, delete, run, archive) took -q QUEUE --id ID while `task cancel`
    and the process commands take a positional id and cancel looks in every queue. Every task
    command now takes ID as its argument, -q optional; the old -q/--id form still works."""
    with Client(redis_url) as c:
        c.enqueue("t", {"n": 1}, task_id="abc", queue="q1")
        c.enqueue("t", None, task_id="dup", queue="q1")
        c.enqueue("t", None, task_id="dup", queue="q2")
    def inspected(*args: str) -> str:
        return re.sub(r"\(.*? ago\)", "", ok(redis_url, "task", "inspect", *args))  # relative times move on

    out = inspected("abc")
    assert "queue     q1" in out and '{"n": 1}' in out, out
    assert inspected("abc", "-q", "q1") == out
    assert inspected("-q", "q1", "--id", "abc") == out  # the old form
    assert ok(redis_url, "task", "archive", "abc") == "archived task abc (queue q1)\n"
    assert ok(redis_url, "task", "run", "abc") == "moved to pending: task abc (queue q1)\n"
    assert ok(redis_url, "task", "edit", "abc", "--max-retry", "3").startswith("edited task abc (queue q1)")
    assert "q1/abc" in ok(redis_url, "task", "tree", "abc")
    fails(redis_url, "task", "delete", "dup", message="tasks with id 'dup' are in queues q1, q2: give -q QUEUE")
    assert ok(redis_url, "task", "delete", "dup", "-q", "q2") == "deleted task dup (queue q2)\n"
    assert ok(redis_url, "task", "delete", "dup") == "deleted task dup (queue q1)\n"  # one left: found
    fails(redis_url, "task", "inspect", "nope", message="task 'nope' not found in any queue")
    fails(redis_url, "task", "inspect", message="give the task id: main task inspect ID [-q QUEUE]")
    fails(redis_url, "task", "inspect", "abc", "--id", "xyz", message="two task ids")
    assert Inspector(redis_url).task_info("q1", "abc").max_retry == 3


def test_process_ls_lists_every_queue_without_q(redis_url: str) -> None:
    """`process ls` listed queue 'default' only unless given -q, while `task cancel` looks in every
    queue: without -q it now lists the processes of every queue, with a queue column."""
    import asyncio

    from helpers import serving, until
    from test_durable_processes import payment_mux

    async def main_() -> None:
        async with serving(redis_url, payment_mux(), queues=["pa", "pb"]):
            with Client(redis_url) as c, Inspector(redis_url) as insp:
                c.start_process("payment", "c1", {"amount": 1}, queue="pa")
                c.start_process("payment", "c2", {"amount": 2}, queue="pb")
                # both inits committed: the listings below read records no worker changes any more
                await until(lambda: insp.process("pa", "c1").status == "running"
                            and insp.process("pb", "c2").status == "running", 10)
            code, out, err = await asyncio.to_thread(run, redis_url, "process", "ls")
            assert code == 0 and "2 process(es) in every queue" in out and "c1" in out and "c2" in out, (out, err)
            assert " pa " in out and " pb " in out, out
            code, out, _ = await asyncio.to_thread(run, redis_url, "process", "ls", "-q", "pa")
            assert code == 0 and "1 process(es) in queue pa" in out and "c1" in out and "c2" not in out, out
            every = json.loads((await asyncio.to_thread(run, redis_url, "process", "ls", "--json"))[1])["processes"]
            assert sorted(p["id"] for p in every) == ["c1", "c2"]
            latest = max(p["updated"] for p in every)
            code, out, _ = await asyncio.to_thread(run, redis_url, "process", "ls", "--json", "-n", "1")
            listed = json.loads(out)
            assert listed["total"] == 2 and len(listed["processes"]) == 1
            assert listed["processes"][0]["updated"] == latest  # the latest changed (either, if both at once)

    asyncio.run(main_())
