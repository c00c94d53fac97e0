"""The README's quickstart works as written: its files (tasks.py, producer.py, result.py) and its
shell commands are taken from README.md, written into a fresh directory, and run there against the
session's redis-server (through $ASYNQPY_REDIS_URL, as the quickstart says for a Redis that is not
on localhost:6379): the worker started from that directory, the producer, the result read back."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_sync

from asynqpy import Inspector

pytestmark = pytest.mark.real

README = Path(__file__).resolve().parent.parent / "README.md"


def quickstart() -> tuple[dict[str, str], list[list[str]]]:
    """The quickstart's files (python blocks opening with '# NAME.py') and its shell commands (the
    lines of its bash blocks, comments dropped), in order."""
    text = README.read_text()
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    files: dict[str, str] = {}
    commands: list[list[str]] = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", section, re.DOTALL):
        if lang == "python":
            name = re.fullmatch(r"# (\w+\.py)", body.splitlines()[0])
            assert name, f"a quickstart python block does not start with '# file.py': {body[:60]!r}"
            files[name.group(1)] = body
        elif lang == "bash":
            commands += [words for line in body.splitlines() if (words := shlex.split(line, comments=True))]
    return files, commands


def asynqpy_command() -> list[str]:
    """The `asynqpy` command of the Python running the tests (its venv's script, else -m)."""
    script = shutil.which("asynqpy", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "asynqpy.cli.main"]


def argv(words: list[str], id: str = "") -> list[str]:
    """A quickstart command line as this test runs it: `asynqpy` and `python` are the test's own,
    the placeholder ID the task id producer.py printed."""
    words = [id if w == "ID" else w for w in words]
    if words[0] == "asynqpy":
        return [*asynqpy_command(), *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    raise AssertionError(f"unexpected quickstart command {words}")


def test_readme_quickstart_as_written(redis_url: str, tmp_path: Path) -> None:
    files, commands = quickstart()
    assert set(files) == {"tasks.py", "producer.py", "result.py"}, files.keys()
    assert commands[0][0] == "cd", commands  # the worker runs from the directory holding tasks.py
    app = tmp_path / commands[0][1]
    app.mkdir()
    for name, code in files.items():
        (app / name).write_text(code)
    worker_words = next(c for c in commands if c[:2] == ["asynqpy", "worker"])
    others = [c for c in commands[1:] if c != worker_words]
    assert [c[:2] for c in others[:2]] == [["python", "producer.py"], ["python", "result.py"]], others

    env = {**os.environ, "ASYNQPY_REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(argv(worker_words), cwd=app, env=env, stdout=out, stderr=subprocess.STDOUT)
    insp = Inspector(redis_url)
    try:
        def up() -> bool:
            assert worker.poll() is None, f"the worker exited with {worker.returncode}:\n{log.read_text()}"
            return any(s.pid == worker.pid for s in insp.servers())

        wait_sync(up, 20)

        def run(words: list[str], id: str = "") -> str:
            res = subprocess.run(argv(words, id), cwd=app, env=env, capture_output=True, text=True, timeout=30, check=False)
            assert res.returncode == 0, (words, res.stdout, res.stderr)
            return res.stdout

        printed = run(others[0])                                          # python producer.py
        match = re.fullmatch(r"report task: (\S+)\n", printed)
        assert match, printed
        id = match.group(1)

        assert run(others[1], id) == "{'rows': 3}\n{'rows': 2}\n"        # python result.py ID
        wait_sync(lambda: "mail to user 42 attempt 1" in log.read_text(), 20)
        wait_sync(lambda: insp.queue_info("low").processed_total == 1, 20)         # resize_image
        assert insp.queue_info("default").processed_total == 2                     # build_report twice
        critical, default = insp.queue_info("critical"), insp.queue_info("default")
        assert (critical.processed_total, critical.failed_total, default.failed_total) == (1, 0, 0)
        assert critical.scheduled == 1                                    # user 7, in a minute
        before = insp.queue_info("critical").size
        for wrong in ("'42'", "'42', 1", "user=42"):  # the README's wrong call (was accepted), too many, unknown
            res = subprocess.run([sys.executable, "-c", f"from tasks import deliver_email; deliver_email.enqueue({wrong})"],
                                 cwd=app, env=env, capture_output=True, text=True, timeout=30, check=False)
            assert res.returncode == 1 and "asynqpy.core.model.errors.InvalidArgumentError: task tasks.deliver_email:" \
                in res.stderr, (wrong, res.stderr)
        assert "argument 'user_id' must be int, got str '42'" in subprocess.run(
            [sys.executable, "-c", "from tasks import deliver_email; deliver_email.enqueue('42')"],
            cwd=app, env=env, capture_output=True, text=True, timeout=30, check=False).stderr
        assert insp.queue_info("critical").size == before                # nothing was enqueued

        for words in others[2:]:                                          # asynqpy task inspect, stats
            out = run(words, id)
            if words[1:3] == ["task", "inspect"]:
                assert re.search(r"\nstate +completed\n", out) and '{"rows": 3}' in out, out
            else:
                assert words[1] == "stats" and "critical" in out and "default" in out, out
        assert worker.poll() is None
    finally:
        insp.close()
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
    assert worker.returncode == 0, log.read_text()  # a graceful shutdown
