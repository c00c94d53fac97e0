"""Worker processes forked from one interpreter that imported asynqpy once (issue 43's budget).

A storm kills and restarts worker processes dozens of times; each ``python -m asynqpy.cli.main
worker`` start imported asynqpy, redis-py and the handlers again (~0.6 s of CPU each, most of a
storm's CPU). :class:`Zygote` runs this module as a process that imports them once, then forks a
child per start: the child runs ``asynqpy.cli.main``'s command as ``-m`` would (``sys.argv``, the
interpreter's normal exit), with its output in its own log. The worker code that runs is the
same; what a start no longer repeats is the import. ``ASYNQPY_FORK_WORKERS=0``: an interpreter
per start, as before (to compare).

A start whose argv is ``["-c", CODE]`` runs CODE as ``python -c`` would (its module ``__main__``):
tests/test_docs.py runs the docs' examples so.

Protocol (lines on the zygote's stdin and stdout): ``start <log path> <json argv>`` answers
``pid <pid>``; each child that exits is reported as ``exit <pid> <returncode>`` (Popen's
convention: minus the signal that killed it); the zygote ends when its stdin closes, once its
children have exited.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

PRELOAD = ("asynqpy.cli.main", "asynqpy.server", "asynqpy.worker.processor", "redis.asyncio", "fault_workers")
"""What the zygote imports before it forks (what every worker start imported by itself)."""


def _serve() -> list[str] | None:
    """The zygote's loop. Returns the argv of a child to run (in the child), None at the end."""
    sys.path[0] = os.getcwd()  # (as ``python -m`` has it: the zygote runs as a script)
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass  # (a target another test names: the child imports it)
    out = sys.stdout
    buf, children, closed = b"", set[int](), False
    while not closed or children:
        ready, _, _ = select.select([] if closed else [0], [], [], 0.05)
        if ready:
            data = os.read(0, 65536)
            closed = not data
            buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            _, log, argv = line.decode().split(" ", 2)
            out.flush()
            pid = os.fork()
            if pid == 0:  # the child: its log in place of the zygote's pipes
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                os.close(null)
                return list(json.loads(argv))
            children.add(pid)
            out.write(f"pid {pid}\n")
            out.flush()
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            out.write(f"exit {pid} {os.waitstatus_to_exitcode(status)}\n")
            out.flush()
    return None


class ForkedProcess:
    """A forked worker, as much of ``subprocess.Popen`` as the scenarios use."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote, self.pid = zygote, pid

    @property
    def returncode(self) -> int | None:
        return self.zygote.codes.get(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self.zygote.changed:
            if not self.zygote.changed.wait_for(lambda: self.pid in self.zygote.codes or self.zygote.gone, timeout):
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
        return self.zygote.codes.get(self.pid, -signal.SIGKILL)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # (not reaped yet: the pid is still this child's)
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """The zygote process (``env``, ``cwd``: what each worker would have had) and the children it
    forked (``codes``: their return codes once they exited)."""

    def __init__(self, env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__], env=env, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.codes: dict[int, int] = {}
        self.gone = False
        self.changed = threading.Condition()
        self.pids: list[int] = []
        self.lock = threading.Lock()  # one start at a time: its answer is the next pid line
        self.reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self.reader.start()

    def _read(self, stdout: IO[bytes]) -> None:
        for raw in stdout:
            what, pid, *rest = raw.decode().split()
            with self.changed:
                if what == "pid":
                    self.pids.append(int(pid))
                else:
                    self.codes[int(pid)] = int(rest[0])
                self.changed.notify_all()
        with self.changed:
            self.gone = True
            self.changed.notify_all()

    def start(self, argv: list[str], log: Path) -> ForkedProcess:
        with self.lock, self.changed:
            n = len(self.pids)
            self.stdin.write(f"start {log} {json.dumps(argv)}\n".encode())
            self.stdin.flush()
            if not self.changed.wait_for(lambda: len(self.pids) > n or self.gone, 30):
                raise RuntimeError("the zygote did not fork a worker within 30 s")
            if self.gone:
                raise RuntimeError("the zygote exited")
            return ForkedProcess(self, self.pids[n])

    def stop(self) -> None:
        """Once its children exited: the zygote ends (its stdin closed) and is waited for (so the
        CPU of its children is counted as the test's, tests/conftest.py)."""
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)


def main() -> None:
    argv = _serve()
    if argv is None:
        return
    if argv[0] == "-c":  # ``python -c CODE`` (tests/test_docs.py's examples): run as __main__
        import builtins

        sys.argv = ["-c"]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
        return
    from asynqpy.cli.main import main as cli  # (imported before the fork)

    sys.argv = argv
    cli()  # click exits with the command's status, as ``python -m asynqpy.cli.main`` does


if __name__ == "__main__":
    main()
