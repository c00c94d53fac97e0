"""The dashboard without a terminal: key decoding, raw mode on a pty, the state machine, the
throughput sampler, the screens rendered at 80x24 (and larger) from fixed data, and the refresh
loop driven by scripted keys against a fake Inspector (including Redis lost and found again)."""

from __future__ import annotations

import io
import os
import termios
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from click.testing import CliRunner
from redis.exceptions import ConnectionError as RedisConnectionError
from redisproc import free_port
from rich.cells import cell_len
from rich.console import Console, RenderableType

from asynqpy import QueueInfo, ServerInfo, WorkerInfo
from asynqpy.cli.dash import MEMORY_EVERY, Dash, safe_url
from asynqpy.cli.dash_render import (
    HELP_NOTES,
    Snapshot,
    count,
    duration,
    page_size_for,
    per_second,
    relative,
    render,
    size_bytes,
)
from asynqpy.cli.dash_state import DashState, Throughput, View
from asynqpy.cli.main import main
from asynqpy.cli.terminal import ESC_WAIT, KeyDecoder, RawKeys, read_keys
from asynqpy.core.model.codec import Message
from asynqpy.core.model.task import TaskInfo, TaskState

NOW = datetime(2026, 11, 23, 14, 3, 12, tzinfo=timezone.utc)


def qi(name: str, pending: int = 0, active: int = 0, scheduled: int = 0, retry: int = 0, archived: int = 0,
       completed: int = 0, *, paused: bool = False, processed: int = 0, failed: int = 0,
       memory: int | None = 2048, latency: float = 12.5) -> QueueInfo:
    size = pending + active + scheduled + retry + archived + completed
    return QueueInfo(name, size, pending, active, scheduled, retry, archived, completed, paused,
                     latency if pending else 0.0, processed // 10, failed // 10, processed, failed, memory, NOW)


def worker(n: int, queue: str, type: str, running: float, deadline_in: float | None) -> WorkerInfo:
    return WorkerInfo(f"run{n:013d}", queue, type, NOW - timedelta(seconds=running),
                      NOW + timedelta(seconds=deadline_in) if deadline_in is not None else None)


def server(host: str, pid: int, active: list[WorkerInfo], concurrency: int = 10) -> ServerInfo:
    return ServerInfo(f"{host}:{pid}:ab", host, pid, {"critical": 6, "default": 3, "low": 1}, concurrency, False,
                      NOW - timedelta(minutes=12), active)


def ms(delta: timedelta) -> int:
    return int((NOW + delta).timestamp() * 1000)


def task(n: int, queue: str = "default", state: TaskState = TaskState.PENDING, **msg: Any) -> TaskInfo:
    msg.setdefault("payload", {"user": n})
    msg.setdefault("enqueued_at_ms", ms(-timedelta(seconds=90)))
    return TaskInfo.from_message(f"t{n:015d}", queue, state, Message(msg.pop("type", "email:deliver"), **msg),
                                 ms(timedelta(minutes=5)))


def show(r: RenderableType, width: int = 80, height: int = 24) -> list[str]:
    """Render like the terminal would and check the frame: exactly ``height`` lines, none wider."""
    console = Console(record=True, width=width, height=height, file=io.StringIO())
    console.print(r)
    lines = console.export_text().splitlines()
    assert len(lines) == height, "\n".join(lines)
    assert all(cell_len(line) <= width for line in lines), "\n".join(lines)
    return lines


def screen(state: DashState, snap: Snapshot, rates: Throughput | None = None, width: int = 80,
           height: int = 24) -> list[str]:
    state.page_size = page_size_for(height)
    return show(render(state, snap, rates or Throughput(), width=width, height=height, now=NOW,
                       source="redis://127.0.0.1:6379/0"), width, height)


# ----------------------------------------------------------------------------------- keys

@pytest.mark.parametrize("data, keys", [
    (b"q", ["q"]),
    (b"jk?", ["j", "k", "?"]),
    (b"\x1b[A\x1b[B\x1b[C\x1b[D", ["up", "down", "right", "left"]),
    (b"\x1bOA\x1bOD", ["up", "left"]),                 # application cursor mode
    (b"\x1b[5~\x1b[6~\x1b[H\x1b[F", ["pageup", "pagedown", "home", "end"]),
    (b"\r\n\x7f\x08\x03\x0c", ["enter", "enter", "backspace", "backspace", "ctrl-c", "ctrl-l"]),
    (b"\x1bq", ["esc", "q"]),                           # Esc then a key in one read
    (b"\x1b[1;5C", []),                                 # an unknown sequence is dropped whole
    (b"\x01", []),                                      # an unknown control character too
])
def test_key_decoder(data: bytes, keys: list[str]) -> None:
    d = KeyDecoder()
    assert d.feed(data) == keys
    assert not d.pending


def test_key_decoder_split_sequences_and_lone_esc() -> None:
    d = KeyDecoder()
    assert d.feed(b"\x1b") == [] and d.pending
    assert d.feed(b"[") == [] and d.pending
    assert d.feed(b"Bn") == ["down", "n"]
    assert d.feed(b"\x1b") == []
    assert d.flush() == ["esc"] and not d.pending
    assert d.feed(b"\x1b[6") == [] and d.flush() == []  # a cut sequence is not an Esc
    assert d.feed("é".encode()[:1]) == [] and d.feed("é".encode()[1:] + b"q") == ["é", "q"]


def test_read_keys_waits_only_as_long_as_asked() -> None:
    r, w = os.pipe()
    try:
        d = KeyDecoder()
        t0 = time.monotonic()
        assert read_keys(r, d, 0.05) == []
        assert 0.04 <= time.monotonic() - t0 < 1
        os.write(w, b"\x1b[A")
        assert read_keys(r, d, 5) == ["up"]
        os.write(w, b"\x1b")                               # a lone Esc: resolved after ESC_WAIT
        t0 = time.monotonic()
        assert read_keys(r, d, 5) == ["esc"]
        assert time.monotonic() - t0 < ESC_WAIT + 1
        os.write(w, b"n")
        os.close(w)
        w = -1
        assert read_keys(r, d, 5) == ["n"]
        assert read_keys(r, d, 5) == ["eof"]               # end of input reads as a key to quit on
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_read_keys_reads_a_descriptor_past_1023() -> None:
    """select.select refuses a descriptor number of 1 024 or more (a process with many files or
    sockets open: a test worker late in the suite failed this way); the keys are read by poll."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open {hard} descriptors, fewer than 1 200")
    if soft != resource.RLIM_INFINITY and soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    r, w = os.pipe()
    high = os.dup2(r, 1100)
    try:
        os.write(w, b"q")
        assert read_keys(high, KeyDecoder(), 5) == ["q"]
        assert read_keys(high, KeyDecoder(), 0.05) == []
        os.close(w)
        w = -1
        assert read_keys(high, KeyDecoder(), 5) == ["eof"]
    finally:
        os.close(high)
        os.close(r)
        if w >= 0:
            os.close(w)
        if soft != resource.RLIM_INFINITY and soft < 1200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def pty_stdin() -> Iterator[io.TextIOWrapper]:
    master, slave = os.openpty()
    stream = os.fdopen(slave, "r")
    try:
        yield stream
    finally:
        stream.close()
        os.close(master)


def test_raw_keys_sets_raw_mode_and_restores_it_even_on_error(pty_stdin: io.TextIOWrapper) -> None:
    fd = pty_stdin.fileno()
    before = termios.tcgetattr(fd)
    assert before[3] & termios.ECHO and before[3] & termios.ICANON
    with pytest.raises(RuntimeError):
        with RawKeys(pty_stdin):
            raw = termios.tcgetattr(fd)
            assert not raw[3] & (termios.ECHO | termios.ICANON) and not raw[0] & termios.IXON
            assert raw[3] & termios.ISIG          # Ctrl-C still interrupts a blocked read
            raise RuntimeError("boom")
    assert termios.tcgetattr(fd) == before


# ------------------------------------------------------------------------------ formatting

def test_formatting_stays_narrow() -> None:
    assert [count(n) for n in (0, 999, 1000, 9999, 10_000, 999_999, 1_000_000, 12_345_678, 10**12)] == \
        ["0", "999", "1.0k", "9.9k", "10k", "999k", "1.0M", "12M", "1.0T"]
    assert [per_second(x) for x in (None, 0.0, 0.25, 9.94, 12.4, 999.0, 1500.0)] == \
        ["-", "0", "0.2", "9.9", "12", "999", "1.5k"]
    assert [size_bytes(n) for n in (None, 0, 1023, 1024, 10 * 1024, 5 * 1024**2, 3 * 1024**3)] == \
        ["-", "0B", "0.9K", "1.0K", "10K", "5.0M", "3.0G"]
    assert [duration(s) for s in (-1, 0.44, 12.9, 61, 7200, 3 * 86400)] == ["0.0s", "0.4s", "12s", "1m", "2h", "3d"]
    assert relative(NOW + timedelta(seconds=30), NOW) == "in 30s"
    assert relative(NOW - timedelta(minutes=5), NOW) == "5m ago" and relative(None, NOW) == "-"
    for n in (0, 7, 999, 1000, 1023, 999_999, 10**6, 10**9, 10**15, 10**21):
        assert len(count(n)) <= 4 and len(size_bytes(n)) <= 4, n


# ------------------------------------------------------------------------------ throughput

def test_throughput_over_the_last_minute() -> None:
    t = Throughput(window=60)
    t.add(0, [qi("a", processed=100, failed=10)])
    assert t.rates("a") is None                         # one sample: no rate yet
    t.add(10, [qi("a", processed=150, failed=10)])
    assert t.rates("a") == (5.0, 0.0)
    for s in range(20, 121, 10):                          # 10 processed/s from t=10 on, 1/s of them failed
        t.add(s, [qi("a", processed=150 + 10 * (s - 10), failed=10 + (s - 10))])
    ok, failed = t.rates("a")  # type: ignore[misc]
    assert ok == pytest.approx(9.0) and failed == pytest.approx(1.0)  # processed counts failures: 9 succeeded/s
    t.add(130, [qi("a", processed=5, failed=0)])          # counters went back: removed and made again
    assert t.rates("a") is None
    t.add(140, [qi("b")])
    assert t.rates("a") is None and t.rates("b") is None  # a vanished queue is forgotten


def test_throughput_window_forgets_old_bursts() -> None:
    t = Throughput(window=60)
    t.add(0, [qi("a", processed=0)])
    t.add(1, [qi("a", processed=6000)])                   # a burst long ago
    for s in range(2, 200, 2):
        t.add(s, [qi("a", processed=6000)])
    assert t.rates("a") == (0.0, 0.0)


# ---------------------------------------------------------------------------- state machine

QUEUES = [qi("critical", 5), qi("default", 45, scheduled=3), qi("low", 1, paused=True)]


def test_state_machine_navigation() -> None:
    s = DashState(page_size=19)
    s.sync(QUEUES)
    assert s.cursor == "critical" and s.want() is None
    for key, cursor in (("down", "default"), ("j", "low"), ("j", "low"), ("k", "default"), ("home", "critical"),
                        ("end", "low"), ("up", "default")):
        s.handle(key, QUEUES)
        assert s.cursor == cursor, key
    s.handle("enter", QUEUES)
    assert s.view is View.QUEUE and s.want() == ("default", TaskState.PENDING, 1, 19)
    s.handle("n", QUEUES)
    s.handle("n", QUEUES)
    s.handle("n", QUEUES)                                 # 45 pending = 3 pages of 19: stays on 3
    assert s.page == 3
    s.handle("p", QUEUES)
    assert s.page == 2
    s.handle("right", QUEUES)                             # a new tab starts on page 1
    assert (s.tab, s.page) == (TaskState.ACTIVE, 1)
    s.handle("n", QUEUES)
    assert s.page == 1                                    # nothing active: a single page
    s.handle("l", QUEUES)
    assert s.tab is TaskState.SCHEDULED
    s.handle("h", QUEUES)
    s.handle("left", QUEUES)
    s.handle("left", QUEUES)                              # wraps around
    assert s.tab is TaskState.BLOCKED
    s.handle("4", QUEUES)
    assert s.tab is TaskState.RETRY
    s.handle("7", QUEUES)                                 # the tasks waiting on parents, then those behind a key
    assert s.tab is TaskState.WAITING
    s.handle("8", QUEUES)
    assert s.tab is TaskState.BLOCKED
    s.handle("9", QUEUES)                                 # no ninth tab: nothing changes
    assert s.tab is TaskState.BLOCKED
    s.handle("?", QUEUES)
    assert s.help
    s.handle("esc", QUEUES)                               # any key closes help, and only that
    assert not s.help and s.view is View.QUEUE
    s.handle("backspace", QUEUES)
    assert s.view is View.QUEUES and s.cursor == "default"
    s.handle("esc", QUEUES)                               # harmless in the table
    assert not s.quit
    s.handle("q", QUEUES)
    assert s.quit


def test_state_follows_queues_that_come_and_go() -> None:
    s = DashState(page_size=10)
    s.handle("down", [])                                  # no queues: nothing to select
    s.sync([])
    assert s.cursor is None
    s.sync(QUEUES)
    s.handle("j", QUEUES)
    s.handle("enter", QUEUES)
    s.handle("end", QUEUES)
    assert s.page == 5
    s.sync([qi("critical"), qi("default", 12), qi("low")])  # drained: the page moves back
    assert s.page == 2
    s.sync([qi("critical"), qi("low")])                   # removed: back to the table, cursor on a neighbour
    assert s.view is View.QUEUES and s.cursor == "low"
    s.sync([qi("critical")])
    assert s.cursor == "critical"
    for key in ("ctrl-c", "eof"):
        s2 = DashState()
        s2.handle(key, QUEUES)
        assert s2.quit


# --------------------------------------------------------------------------------- screens

SERVERS = [server("worker-host-1", 4123, [worker(1, "default", "email:deliver", 3, 27),
                                           worker(2, "critical", "image:resize", 65, None)]),
           server("worker-host-2", 4200, [worker(3, "default", "report:build", 1, 600)], concurrency=4)]


def rates_for(before: list[Any], after: list[Any], seconds: float = 60) -> Throughput:
    t = Throughput()
    t.add(0, before)
    t.add(seconds, after)
    return t


def test_queues_screen_80x24() -> None:
    before = [qi("critical", 5, 1, 2, processed=100), qi("default", 120, 3, 0, 27, 4, 1200, processed=50_000, failed=12),
              qi("a-rather-long-queue-name-for-80-columns", 1, paused=True, memory=None)]
    after = [qi("critical", 5, 1, 2, processed=160), qi("default", 120, 3, 0, 27, 4, 1200, processed=50_600, failed=15),
             qi("a-rather-long-queue-name-for-80-columns", 1, paused=True, memory=None)]
    state = DashState(cursor="default")
    lines = screen(state, Snapshot(queues=after, servers=SERVERS, updated=NOW), rates_for(before, after))
    text = "\n".join(lines)
    assert lines[0].startswith("asynqpy dash redis://127.0.0.1:6379/0") and lines[0].endswith("14:03:12 UTC")
    for header in ("queue", "state", "size", "pend", "actv", "schd", "rtry", "arch", "done", "lat", "ok/s",
                   "fail/s", "mem"):
        assert header in lines[1]
    row = next(line for line in lines if "default" in line and "run" in line)
    # 600 processed in 60 s, 3 of them failed: 597 succeeded (9.95/s)
    assert row.startswith("› default") and row.split()[2:] == ["run", "1.3k", "120", "3", "0", "27", "4", "1.2k",
                                                                "12.5s", "9.9", "0.1", "2.0K"]
    crit = next(line for line in lines if "critical" in line and "run" in line)
    assert crit.split()[-4:] == ["12.5s", "1.0", "0", "2.0K"]         # 60 succeeded in 60 s
    long_row = next(line for line in lines if "paused" in line)
    assert "a-rather-lo" in long_row and "…" in long_row and long_row.split()[-1] == "-"  # the name is cut
    assert "Servers 2 live · busy 3/14" in text
    assert "worker-host-1:4123" in text and "critical=6,default=3,low=1" in text and "2/10" in text
    assert "Running 3" in text
    resize = next(line for line in lines if "image:resize" in line)
    assert resize.split()[1:] == ["critical", "1m", "-", "run0000000000002", "4123"]  # oldest first
    deliver = next(line for line in lines if "email:deliver" in line)
    assert "3.0s" in deliver and "in 27s" in deliver
    assert lines[-1].startswith("↑↓ select  Enter open") and lines[-1].endswith("3 queues")


def test_succeeded_and_failed_are_told_apart() -> None:
    """The processed counters count failed attempts too: ok/s and "today ok" are processed minus
    failed (it was processed, labelled ok), fail/s and "today fail" the failures."""
    before = [qi("mail", 0, processed=1000, failed=100)]
    after = [qi("mail", 3, processed=1600, failed=400)]   # 600 attempts in 60 s, 300 failed; today 160 / 40
    lines = screen(DashState(cursor="mail"), Snapshot(queues=after, updated=NOW), rates_for(before, after),
                   width=120)
    header = lines[1].split()
    assert header[-6:] == ["fail/s", "mem", "today", "ok", "today", "fail"]
    row = next(line for line in lines if "mail" in line).split()
    assert row[-5:] == ["5.0", "5.0", "2.0K", "120", "40"], row
    state = DashState(cursor="mail")
    state.handle("enter", after)
    summary = screen(state, Snapshot(queues=after, updated=NOW), rates_for(before, after))[1]
    assert "5.0 ok/s  5.0 fail/s  today 120 ok 40 failed" in summary, summary
    assert "succeeded / failed" in "\n".join(HELP_NOTES)


def test_a_quiet_or_stopping_server_says_so() -> None:
    from dataclasses import replace

    servers = [replace(SERVERS[0], status="quiet"), replace(SERVERS[1], status="stopping")]
    lines = screen(DashState(), Snapshot(queues=[qi("default", 3)], servers=servers, updated=NOW), width=100)
    text = "\n".join(lines)
    assert "Servers 2 live · busy 3/14 · 1 quiet" in text
    assert "worker-host-1:4123 quiet" in text and "worker-host-2:4200 stopping" in text
    plain = screen(DashState(), Snapshot(queues=[qi("default", 3)], servers=SERVERS, updated=NOW), width=100)
    row = next(line for line in plain if line.startswith("worker-host-1:4123"))
    assert "quiet" not in row and "running" not in row and "· 1 quiet" not in "\n".join(plain)


def test_queues_screen_before_throughput_and_without_servers() -> None:
    lines = screen(DashState(), Snapshot(queues=[qi("default", 3)], updated=NOW))
    row = next(line for line in lines if "default" in line)
    assert row.split()[-4:] == ["12.5s", "-", "-", "2.0K"]            # no rate before two samples
    assert any(line.startswith("Servers none live") for line in lines)
    assert not any("Running" in line for line in lines)
    lines = screen(DashState(), Snapshot(updated=NOW))
    assert "no queues yet" in lines[1]


def test_many_queues_scroll_with_the_cursor_and_long_lists_are_cut() -> None:
    queues = [qi(f"q{i:02d}", i) for i in range(50)]
    many = [server(f"host{i}", 1000 + i, [worker(i * 10 + j, "q01", "t", j, 5) for j in range(3)]) for i in range(8)]
    state = DashState(cursor="q37")
    lines = screen(state, Snapshot(queues=queues, servers=many, updated=NOW))
    text = "\n".join(lines)
    assert "› q37" in text and "q00" not in text                      # the window follows the cursor
    assert "… " in text and "more" in text                            # cut sections say how many are hidden
    servers_shown = sum(1 for line in lines if line.startswith("host"))
    running_shown = sum(1 for line in lines if line.startswith("t "))
    assert servers_shown >= 1 and running_shown >= 1
    state.handle("home", queues)
    assert "› q00" in "\n".join(screen(state, Snapshot(queues=queues, servers=many, updated=NOW)))


def test_queue_view_pages_and_tabs() -> None:
    queues = [qi("default", 45, 1, 3, 2, 1, 1)]
    state = DashState(cursor="default")
    state.page_size = page_size_for(24)
    state.handle("enter", queues)
    snap = Snapshot(queues=queues, updated=NOW)
    lines = screen(state, snap)
    assert lines[0].startswith("asynqpy dash › default")
    assert "size 53" in lines[1] and "latency 12.5s" in lines[1]
    assert "[pending 45]" in lines[2] and "scheduled 3" in lines[2] and "completed 1" in lines[2]
    assert "loading…" in lines[3]                                     # the page is not read yet
    snap.tasks, snap.tasks_for = [task(i) for i in range(19)], state.want()
    lines = screen(state, snap)
    assert lines[3].split() == ["id", "type", "enqueued", "retried", "payload"]
    assert lines[4].split()[:5] == ["t000000000000000", "email:deliver", "1m", "ago", "0/25"]
    assert '{"user": 0}' in lines[4]
    assert lines[22].startswith("t000000000000018")                   # 19 rows fill the screen
    assert lines[-1].startswith("←→ state") and lines[-1].endswith("page 1/3")
    state.handle("n", queues)
    assert screen(state, snap)[-1].endswith("page 2/3")

    failed = dict(last_error="ConnectionResetError: peer went away\n  at line 3", retried=3,
                  last_failed_at_ms=ms(-timedelta(minutes=2)))
    cases = {
        "2": (TaskState.ACTIVE, dict(deadline_ms=ms(timedelta(seconds=40))),
              ["id", "type", "lease", "deadline", "retried", "progress", "payload"], "in 40s"),
        "3": (TaskState.SCHEDULED, {}, ["id", "type", "due", "retried", "payload"], "in 5m"),
        "4": (TaskState.RETRY, failed, ["id", "type", "next", "try", "retried", "last", "error"], "ConnectionResetError: peer"),
        "5": (TaskState.ARCHIVED, failed, ["id", "type", "archived", "retried", "last", "error"], "2m ago"),
        "6": (TaskState.COMPLETED, dict(result={"ok": True}, completed_at_ms=ms(-timedelta(seconds=3))),
              ["id", "type", "done", "result"], '{"ok": true}'),
    }
    for key, (st, msg, headers, shown) in cases.items():
        state.handle(key, queues)
        assert state.tab is st and state.page == 1
        snap.tasks, snap.tasks_for = [task(1, state=st, **msg)], state.want()
        lines = screen(state, snap)
        assert f"[{st.value}" in lines[2]
        assert lines[3].split() == headers, lines[3]
        assert shown in lines[4], lines[4]
    state.handle("2", queues)                                         # active: lease left, or orphaned
    live, dead = task(1, state=TaskState.ACTIVE), task(2, state=TaskState.ACTIVE)
    live.lease_until, dead.lease_until, dead.orphaned = NOW + timedelta(seconds=25), NOW - timedelta(seconds=1), True
    snap.tasks, snap.tasks_for = [live, dead], state.want()
    lines = screen(state, snap)
    assert lines[4].split()[2:4] == ["in", "25s"] and lines[5].split()[2] == "orphaned"
    state.handle("5", queues)                                         # archived: when it was archived
    old = task(3, state=TaskState.ARCHIVED, **failed)
    old.archived_at = NOW - timedelta(hours=3)
    snap.tasks, snap.tasks_for = [old], state.want()
    assert screen(state, snap)[4].split()[2:4] == ["3h", "ago"]
    state.handle("6", queues)
    snap.tasks, snap.tasks_for = [], state.want()
    assert "no completed tasks" in screen(state, snap)[3]


def test_queue_view_marks_a_paused_queue_and_a_narrow_tab_line() -> None:
    """Also: archived tasks deleted by the archive limits are counted in the summary."""
    queues = [qi("low", 123_456, 2, 3, 4_000, 5, 600_000, paused=True)]
    state = DashState()
    state.sync(queues)
    state.handle("enter", queues)
    queues = [replace(queues[0], trimmed=4321)]
    lines = screen(state, Snapshot(queues=queues, updated=NOW), width=60)
    assert "(paused)" in lines[0]
    assert "pend" in lines[2] and "done 600k" in lines[2]             # short labels when the long ones do not fit
    assert "trimmed 4.3k" in screen(state, Snapshot(queues=queues, updated=NOW), width=120)[1]


def test_help_screen_and_error_footer() -> None:
    state = DashState()
    state.handle("?", [])
    lines = screen(state, Snapshot(queues=QUEUES, updated=NOW))
    text = "\n".join(lines)
    for key in ("Enter", "Esc", "n p", "1-8", "q  Ctrl-C", "?"):
        assert key in text
    assert "over the last minute" in text and "succeeded / failed" in text and lines[-1].startswith("any key: close help")
    snap = Snapshot(queues=QUEUES, updated=NOW, error="cannot reach Redis: Error 111 connecting to 127.0.0.1:6399. "
                                                        "Connection refused. " + "x" * 80)
    lines = screen(DashState(), snap)
    assert lines[-1].startswith("! cannot reach Redis") and lines[-1].endswith("retrying") and "…" in lines[-1]
    assert any("critical" in line for line in lines)                  # the last data stays on screen


@pytest.mark.parametrize("width, height", [(80, 24), (100, 30), (140, 50), (60, 12), (40, 8)])
def test_every_size_fits(width: int, height: int) -> None:
    queues = [qi(f"queue-{i}", i * 7, i, i, i, i, i, processed=i * 1000) for i in range(30)]
    many = [server(f"host{i}", 1000 + i, [worker(i * 10 + j, "queue-1", "type:" + "x" * 30, j, 5) for j in range(4)])
            for i in range(6)]
    snap = Snapshot(queues=queues, servers=many, updated=NOW, error=None)
    state = DashState(cursor="queue-29")
    lines = screen(state, snap, width=width, height=height)
    assert "› queue-29" in "\n".join(lines)
    if width >= 110:
        assert "today ok" in lines[1]
    state.handle("enter", queues)
    snap.tasks, snap.tasks_for = [task(i, payload="p" * 300) for i in range(state.page_size)], state.want()
    lines = screen(state, snap, width=width, height=height)
    assert sum(1 for line in lines if line.startswith("t0")) == page_size_for(height)
    empty = Snapshot(updated=NOW, error="cannot reach Redis: " + "x" * 200)
    lines = screen(DashState(), empty, width=width, height=height)   # long lines are cut, never wrapped
    assert lines[1].startswith("no queues yet") and lines[-1].startswith("! cannot reach Redis")
    state.handle("?", queues)
    assert screen(state, snap, width=width, height=height)[-1].startswith("any key")


# ------------------------------------------------------------------------------ the loop

class FakeSource:
    """An Inspector stand-in that records its calls; ``down`` makes every call fail."""

    def __init__(self, queues: list[Any], tasks: dict[tuple[str, TaskState], list[TaskInfo]]) -> None:
        self.queues = queues
        self.tasks = tasks
        self.calls: list[str] = []
        self.memory_asked: list[bool] = []
        self.procs: dict[str, int] = {}
        self.tenants_of: dict[str, list[Any]] = {}
        self.down = False

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.down:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")

    def all_queue_info(self, memory: bool = True) -> list[Any]:
        self._call("all_queue_info")
        self.memory_asked.append(memory)
        return self.queues if memory else [replace(q, memory_bytes=None) for q in self.queues]

    def servers(self) -> list[Any]:
        self._call("servers")
        return SERVERS

    def list_tasks(self, queue: str, state: TaskState | str, page: int = 1, page_size: int = 30) -> list[TaskInfo]:
        self._call(f"list_tasks {queue} {TaskState(state).value} {page} {page_size}")
        return self.tasks.get((queue, TaskState(state)), [])[(page - 1) * page_size: page * page_size]

    def processes(self, queue: str, start: int = 0, count: int = 100, status: str | None = None) -> tuple[int, list[Any]]:
        self._call(f"processes {queue}")
        return self.procs.get(queue, 0), []

    def tenants(self, queue: str, *, after: str = "", count: int = 100) -> list[Any]:
        self._call(f"tenants {queue} {count}")
        return self.tenants_of.get(queue, [])[:count]


class Script:
    """Keys for Dash.run on a fake clock (the test does not sleep). Each read takes the next step:
    a list of keys (read at once), a number of seconds to let pass without keys (spread over as
    many reads as the loop's waits need), or a function to call (e.g. to break Redis)."""

    def __init__(self, board: Dash, steps: list[Any]) -> None:
        self.board = board
        self.steps = list(steps)
        self.now = 0.0
        self.frames: list[list[str]] = []

    def clock(self) -> float:
        return self.now

    def read(self, timeout: float) -> list[str]:
        step = self.steps.pop(0) if self.steps else ["q"]
        if callable(step):
            step()
            return []
        if isinstance(step, (int, float)):
            waited = min(timeout, step)
            self.now += waited
            if step - waited > 1e-9:
                self.steps.insert(0, step - waited)
            return []
        return list(step)

    def show(self, r: RenderableType) -> None:
        self.frames.append(show(r))


def test_loop_reads_refreshes_pages_and_survives_redis_loss() -> None:
    pending = [task(i) for i in range(45)]
    source = FakeSource([qi("critical", 1), qi("default", 45)], {("default", TaskState.PENDING): pending})
    board = Dash(source, refresh=2.0, label="redis://x", wallclock=lambda: NOW)
    script = Script(board, [])
    board.clock = script.clock
    script.steps = [
        ["j", "enter"],                      # select default, open it: the page is read at once
        ["n"],                               # page 2 at once
        2.0,                                 # a refresh every 2 s: all_queue_info + servers + the page
        lambda: setattr(source, "down", True),
        4.0,                                 # Redis lost: the error shows, the loop keeps going
        lambda: setattr(source, "down", False),
        2.0,                                 # found again: the error goes away
        ["q"],
    ]
    board.run(script, script.show, lambda: (80, 24))
    calls = source.calls
    assert calls[:4] == ["all_queue_info", "servers", "list_tasks default pending 1 19", "processes default"]
    assert calls[4] == "list_tasks default pending 2 19"
    refresh = ["all_queue_info", "servers", "list_tasks default pending 2 19", "processes default"]
    assert calls[5:9] == refresh                              # one refresh = four calls, whatever the depth
    assert calls[9:] == ["all_queue_info", "all_queue_info", *refresh]  # retried every 2 s while down
    first = script.frames[0]
    assert "› critical" in "\n".join(first)
    opened = next(f for f in script.frames if f[0].startswith("asynqpy dash › default") and "t0" in f[4])
    assert opened[4].startswith("t000000000000000") and opened[-1].endswith("page 1/3")
    page2 = next(f for f in script.frames if f[-1].endswith("page 2/3") and f[4].startswith("t0"))
    assert page2[4].startswith("t000000000000019")
    errors = [f for f in script.frames if f[-1].startswith("! cannot reach Redis")]
    assert errors and "t000000000000019" in errors[-1][4]      # the last data stays while Redis is gone
    assert script.frames[-1][-1].endswith("page 2/3")         # recovered
    assert board.state.quit


def test_memory_is_read_every_30_seconds_and_shown_between() -> None:
    """A refresh reads the queues' counts; their memory (a sampled MEMORY USAGE of seven keys a
    queue) only every MEMORY_EVERY seconds, the last reading shown in between (none yet for a
    queue that appeared since)."""
    source = FakeSource([qi("default", 1, memory=4096)], {})
    now = [0.0]
    board = Dash(source, refresh=2.0, label="x", clock=lambda: now[0], wallclock=lambda: NOW)
    shown = []
    for t in (0.0, 2.0, 4.0, 29.0, 30.0, 32.0):
        now[0] = t
        if t == 4.0:
            source.queues.append(qi("new", 1, memory=1024))
        board.read_all()
        shown.append({q.queue: q.memory_bytes for q in board.snap.queues})
    assert MEMORY_EVERY == 30.0 and source.memory_asked == [True, False, False, False, True, False]
    assert shown[:2] == [{"default": 4096}] * 2 and shown[2] == shown[3] == {"default": 4096, "new": None}
    assert shown[4] == shown[5] == {"default": 4096, "new": 1024}


def test_loop_redraws_on_resize_and_ctrl_l() -> None:
    source = FakeSource([qi("default", 1)], {})
    board = Dash(source, refresh=60.0, label="x", wallclock=lambda: NOW)
    script = Script(board, [0.1, 0.1, ["ctrl-l"], 0.1])
    board.clock = script.clock
    sizes = iter([(80, 24), (80, 24), (100, 30)])
    cleared: list[bool] = []
    frames: list[tuple[int, int]] = []

    def size() -> tuple[int, int]:
        return next(sizes, (100, 30))

    def draw(r: RenderableType) -> None:
        frames.append((0, 0))

    board.run(script, draw, size, clear=lambda: cleared.append(True))
    assert cleared == [True] and len(frames) == 3                   # first, resized, Ctrl-L
    assert source.calls.count("all_queue_info") == 1               # no extra reads for redraws


# ------------------------------------------------------------------------------ the command

def test_dash_with_redis_unreachable_is_one_line_exit_2() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    res = CliRunner().invoke(main, ["dash", "--redis-url", url])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("asynqpy: error: cannot reach Redis") and res.stderr.count("\n") == 1


def test_dash_arguments() -> None:
    res = CliRunner().invoke(main, ["dash", "--refresh", "0.1"])
    assert res.exit_code == 2 and "0.5" in res.stderr
    res = CliRunner().invoke(main, ["dash", "--redis-url", "nosuch://x"])
    assert res.exit_code == 2 and res.stderr.startswith("asynqpy: error: bad Redis URL") and res.stderr.count("\n") == 1
    assert safe_url("redis://user:secret@h:1/0") == "redis://user:***@h:1/0"
    assert safe_url("redis://h:1/0") == "redis://h:1/0"


@pytest.mark.real
def test_dash_needs_a_terminal(redis_url: str) -> None:
    res = CliRunner().invoke(main, ["dash", "--redis-url", redis_url])
    assert res.exit_code == 2 and "needs a terminal" in res.stderr and res.stderr.count("\n") == 1


def test_waiting_and_blocked_tabs_list_their_tasks() -> None:
    from asynqpy.core.workflows.records import ParentEnd

    q = replace(qi("default", 5, 0, 0, 0, 0, 0), waiting=2, blocked=1)
    state = DashState(cursor="default")
    state.page_size = page_size_for(24)
    state.handle("enter", [q])
    assert "wait 2  blkd 1" in screen(state, Snapshot(queues=[q], updated=NOW))[2]  # 80 columns: short labels
    lines = screen(state, Snapshot(queues=[q], updated=NOW), width=120)
    assert "waiting 2" in lines[2] and "blocked 1" in lines[2]
    state.handle("8", [q])
    blocked = TaskInfo.from_message("b1", "default", TaskState.BLOCKED, Message("step", "charge", key="order:42"))
    lines = screen(state, Snapshot(queues=[q], updated=NOW, tasks=[blocked], tasks_for=state.want()),
                   width=120)
    assert "[blocked 1]" in lines[2] and any("b1" in ln and "order:42" in ln for ln in lines)
    state.handle("7", [q])
    waiting = TaskInfo.from_message("w1", "default", TaskState.WAITING, Message("notify"))
    waiting.parents = [ParentEnd("default", "p1", "waiting")]
    lines = screen(state, Snapshot(queues=[q], updated=NOW, tasks=[waiting], tasks_for=state.want()),
                   width=120)
    assert "[waiting 2]" in lines[2] and any("w1" in ln and "p1:waiting" in ln for ln in lines)
    quiet = qi("default", 5, 0, 0, 0, 0, 0)  # none of either: no such tabs in the way
    assert "waiting" not in screen(state.__class__(cursor="default", view=View.QUEUE, queue="default"),
                                   Snapshot(queues=[quiet], updated=NOW))[2]


def test_held_tasks_and_processes_at_80x24() -> None:
    """Tasks waiting on their parents or behind their key: a "wait" column while some queue has
    any (the least useful column, mem, makes room at 80 columns); the open queue's durable
    processes in the queue view's title, read with the page (one call a refresh)."""
    queues = [replace(qi("flows", 3, 1, completed=40), waiting=5, blocked=2),
              qi("a-rather-long-queue-name-for-80-columns", 1), qi("plain", 7)]
    lines = screen(DashState(cursor="flows"), Snapshot(queues=queues, servers=SERVERS, updated=NOW))
    assert "wait" in lines[1] and "mem" not in lines[1] and "done" in lines[1]
    flows = next(line for line in lines if "flows" in line)
    assert flows.split()[2:10] == ["run", "44", "3", "1", "0", "0", "0", "40"] and flows.split()[10] == "7"
    assert "a-rather-lo" in "\n".join(lines)  # the name keeps its room
    plain = screen(DashState(cursor="plain"), Snapshot(queues=queues[1:], servers=SERVERS, updated=NOW))
    assert "wait" not in plain[1] and "mem" in plain[1]  # no such tasks: the table as before
    state = DashState(cursor="flows")
    source = FakeSource(queues, {("flows", TaskState.PENDING): [task(1, "flows")]})
    source.procs = {"flows": 12}
    board = Dash(source, refresh=2.0, label="x", clock=lambda: 0.0, wallclock=lambda: NOW)
    board.state = state
    board.read_all()
    state.handle("enter", queues)
    board.read_page()
    top = show(board.screen(80, 24))[0]
    assert top.startswith("asynqpy dash › flows · 12 processes") and top.endswith("14:03:12 UTC")
    source.procs = {"flows": 1}
    board.read_all()
    assert show(board.screen(80, 24))[0].startswith("asynqpy dash › flows · 1 process ")
    source.procs = {}
    board.read_all()
    assert "process" not in show(board.screen(80, 24))[0]
    state.handle("esc", queues)
    board.read_all()
    assert board.snap.processes is None and source.calls[-2:] == ["all_queue_info", "servers"]


def test_tenants_column_and_the_open_queues_first_tenants_at_80x24() -> None:
    """Tenants (docs/tenants.md): a "tnts" column while some queue has tenants with pending tasks
    (mem makes room at 80 columns); the queue view's summary names the first ones, with their
    pending tasks, a pause and a weight, read with the page only while the queue has tenants."""
    from asynqpy.core.tenants.plans import TenantInfo

    queues = [replace(qi("reports", 130, 2), tenants=7), qi("plain", 3)]
    lines = screen(DashState(cursor="reports"), Snapshot(queues=queues, servers=SERVERS, updated=NOW))
    assert "tnts" in lines[1] and "mem" not in lines[1]
    row = next(line for line in lines if "reports" in line).split()
    assert row[2:10] == ["run", "132", "130", "2", "0", "0", "0", "0"] and row[10] == "7"
    assert "tnts" not in screen(DashState(cursor="plain"), Snapshot(queues=queues[1:], servers=SERVERS,
                                                                    updated=NOW))[1]
    source = FakeSource(queues, {})
    source.tenants_of = {"reports": [TenantInfo("acme", 120, weight=3), TenantInfo("globex", 10, paused=True)]}
    state = DashState(cursor="reports")
    board = Dash(source, refresh=2.0, label="x", clock=lambda: 0.0, wallclock=lambda: NOW)
    board.state = state
    board.read_all()
    state.handle("enter", queues)
    board.read_page()
    assert "  tenants 7: acme 120 w3, globex 10" in show(board.screen(80, 24))[1]  # (the end is cut)
    assert "  tenants 7: acme 120 w3, globex 10 paused +5  today" in show(board.screen(200, 24), 200, 24)[1]
    assert "tenants reports 5" in source.calls
    state.handle("esc", queues)
    state.cursor = "plain"
    state.handle("enter", queues)
    source.calls.clear()
    board.read_all()
    assert not [c for c in source.calls if c.startswith("tenants")]  # no tenants: not read
