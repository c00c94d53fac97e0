"""``asynqpy dash`` in a real terminal: a detached tmux session of 80x24 runs the command against
the real redis-server; keys go in with send-keys, the screen comes back with capture-pane. Each
test's tmux runs on its own server socket and its session is killed by name at the end."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import ROOT
from redisproc import RedisProcess

from asynqpy import Client, Inspector

TMUX = shutil.which("tmux")
pytestmark = [pytest.mark.real, pytest.mark.skipif(TMUX is None, reason="tmux is not installed")]


class Pane:
    """A detached tmux session ``width`` x ``height`` running a plain bash, on a tmux server of its
    own whose socket is in ``folder``."""

    def __init__(self, folder: Path, width: int = 80, height: int = 24) -> None:
        assert TMUX is not None
        self.name = f"asynqpy-dash-{uuid.uuid4().hex[:10]}"
        self.tmux = [TMUX, "-S", str(folder / "tmux.sock"), "-f", "/dev/null"]
        self._tmux("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
                   "env -i PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 TERM=screen PS1='$ ' bash --norc --noprofile")

    def _tmux(self, *args: str) -> str:
        return subprocess.run([*self.tmux, *args], check=True, capture_output=True, text=True, timeout=10).stdout

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def type(self, line: str) -> None:
        self._tmux("send-keys", "-t", self.name, "-l", line)
        self.keys("Enter")

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def command(self) -> str:
        return self._tmux("display-message", "-p", "-t", self.name, "#{pane_current_command}").strip()

    def wait(self, ok: Callable[[str], bool], what: str, timeout: float = 15.0) -> str:
        """Poll the screen until ``ok(screen)``; fail with the last screen after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if ok(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"screen never showed {what} within {timeout}s:\n{text}")
            time.sleep(0.05)

    def wait_text(self, *parts: str, timeout: float = 15.0) -> str:
        return self.wait(lambda s: all(p in s for p in parts), " and ".join(map(repr, parts)), timeout)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-session", "-t", self.name], capture_output=True, timeout=10)


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    p = Pane(tmp_path, 80, 24)
    try:
        yield p
    finally:
        p.close()


def run_dash(pane: Pane, tmp_path: Path, url: str, *args: str) -> None:
    """Start the dash in the pane's shell; when it ends the shell prints its exit code and whether
    the terminal's settings are as they were before."""
    script = tmp_path / "run.sh"
    dash = shlex.join([sys.executable, "-m", "asynqpy.cli.main", "dash", "--redis-url", url, *args])
    script.write_text(
        f"cd {shlex.quote(str(ROOT))}\n"
        "before=$(stty -g)\n"
        f"{dash}\n"
        'code=$?\n'
        'if [ "$before" = "$(stty -g)" ]; then same=yes; else same=no; fi\n'
        'echo "dash-exit=$code stty-restored=$same"\n'
    )
    pane.type(f"bash {shlex.quote(str(script))}")


def check_frame(screen: str) -> list[str]:
    lines = screen.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), screen
    return lines


def row(screen: str, start: str) -> list[str]:
    return next(line for line in screen.splitlines() if line.startswith(start)).split()


def test_dash_in_a_real_terminal(redis_url: str, pane: Pane, tmp_path: Path) -> None:
    with Client(redis_url) as c:
        for i in range(2):
            c.enqueue("image:resize", {"n": i}, queue="critical")
        for i in range(45):
            c.enqueue("email:deliver", {"n": i}, queue="default")
        scheduled = [c.enqueue("report:build", {"n": i}, queue="default", process_in=3600).id for i in range(3)]
        c.enqueue("cleanup", None, queue="low")
        parent = c.enqueue("step", None, queue="flows").id  # held tasks: a workflow child, a task behind its key
        c.enqueue("step", None, queue="flows", after=[parent])
        c.enqueue("step", None, queue="flows", key="order:1")
        c.enqueue("step", None, queue="flows", key="order:1")
        c.enqueue("step", None, queue="flows", tenant="acme")  # a tenant: the tnts column, named in the view
        c.start_process("payment", "pay-1", None, queue="flows")  # a durable process (its init input)
    insp = Inspector(redis_url)
    try:
        insp.pause("low")
        page1 = [t.id for t in insp.list_tasks("default", "pending", page=1, page_size=19)]
        page2 = [t.id for t in insp.list_tasks("default", "pending", page=2, page_size=19)]
    finally:
        insp.close()
    assert len(page1) == len(page2) == 19

    run_dash(pane, tmp_path, redis_url, "--refresh", "0.5")
    screen = pane.wait_text("asynqpy dash", "› critical", "↑↓ select")
    check_frame(screen)
    assert row(screen, "› critical")[2:5] == ["run", "2", "2"]
    assert row(screen, "  default")[1:7] == ["run", "48", "45", "0", "3", "0"]
    header = screen.splitlines()[1].split()
    assert header[8:10] == ["wait", "tnts"] and "done" not in header  # (80 columns: mem and done make room)
    assert row(screen, "  flows")[1:3] + row(screen, "  flows")[8:10] == [
        "run", "6", "2", "1"]                                # wait 2 (1 waiting, 1 blocked), 1 tenant
    assert row(screen, "  low")[1] == "paused"
    assert "Servers none live" in screen

    pane.keys("j")                                           # select default
    pane.wait_text("› default")
    pane.keys("Enter")                                       # open it: pending tasks, page 1 of 3
    screen = pane.wait_text("asynqpy dash › default", "[pending 45]", "page 1/3", page1[-1])
    lines = check_frame(screen)
    assert lines[3].split() == ["id", "type", "enqueued", "retried", "payload"]
    assert all(id in screen for id in page1) and '{"n":' in screen

    pane.keys("n")                                           # next page
    screen = pane.wait_text("page 2/3", page2[0])
    assert all(id in screen for id in page2) and not any(id in screen for id in page1)

    pane.keys("Right")                                       # active: nothing runs
    pane.wait_text("[active 0]", "no active tasks")
    pane.keys("Right")                                       # scheduled: due in about an hour
    screen = pane.wait_text("[scheduled 3]", *scheduled)
    assert "in 59m" in screen and "page 1/1" in screen
    pane.keys("1")                                           # back to pending, by number
    pane.wait_text("[pending 45]", "page 1/3")

    pane.keys("Escape")                                      # back to the queue table
    pane.wait_text("› default", "↑↓ select")
    pane.keys("j", "Enter")                                  # flows: its processes, its held tasks' tabs
    screen = pane.wait_text("asynqpy dash › flows · 1 process", " wait 1 ", " blkd 1",  # (80 columns: short tabs)
                            "tenants 1: acme 1")
    check_frame(screen)
    pane.keys("Escape")
    pane.wait_text("› flows", "↑↓ select")
    pane.keys("?")
    pane.wait_text("any key: close help")
    pane.keys("x")
    pane.wait_text("↑↓ select")

    pane.keys("q")
    screen = pane.wait_text("dash-exit=0 stty-restored=yes")
    assert "asynqpy dash" not in screen                      # the alternate screen is gone
    pane.wait(lambda s: pane.command() == "bash", "the shell back in the pane")


def test_dash_survives_redis_going_away(pane: Pane, tmp_path: Path) -> None:
    own = RedisProcess()
    try:
        with Client(own.url) as c:
            c.enqueue("t", None, queue="default")
        run_dash(pane, tmp_path, own.url, "--refresh", "0.5")
        pane.wait_text("› default", "↑↓ select")
        port = own.port
        own.stop()
        screen = pane.wait_text("! cannot reach Redis", "retrying")
        assert "› default" in screen                         # the last data stays on screen
        time.sleep(1.2)                                      # a few failed refreshes: still running
        assert "! cannot reach Redis" in pane.screen()
        own = RedisProcess(port=port)                        # back (empty): the error goes away
        pane.wait_text("no queues yet", "↑↓ select")
        pane.keys("C-c")                                     # Ctrl-C quits cleanly too
        pane.wait_text("dash-exit=0 stty-restored=yes")
    finally:
        own.stop()


def test_dash_killed_with_sigterm_restores_the_terminal(redis_url: str, pane: Pane, tmp_path: Path) -> None:
    with Client(redis_url) as c:
        c.enqueue("t", None, queue="default")
    run_dash(pane, tmp_path, redis_url)
    pane.wait_text("› default", "↑↓ select")
    shell = int(pane._tmux("display-message", "-p", "-t", pane.name, "#{pane_pid}"))
    script = children(shell)
    assert len(script) == 1
    dash = children(script[0])
    assert len(dash) == 1
    os.kill(dash[0], signal.SIGTERM)
    screen = pane.wait_text("dash-exit=143 stty-restored=yes")
    assert "asynqpy dash" not in screen


def children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid``."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, timeout=10)
    return [int(x) for x in out.stdout.split()]
