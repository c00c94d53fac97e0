"""Supervisor for ``asynqpy worker --processes N``: runs N worker processes, restarts one that
crashes (with a short backoff), and forwards SIGTERM/SIGINT so all of them shut down gracefully.
With ``metrics``, it serves the sum of its processes' metrics (worker/metrics.py): they write them to
a directory of its own, named to them by ``PROMETHEUS_MULTIPROC_DIR``."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from types import FrameType

log = logging.getLogger("asynqpy.supervisor")


def supervise(n: int, argv: list[str], *, restart_backoff: float = 1.0,
              metrics: tuple[str, int] | None = None) -> int:
    """Run ``n`` copies of ``argv`` until SIGTERM/SIGINT; returns the exit code for the supervisor.
    ``metrics``: (host, port) to serve the processes' summed metrics on."""
    stopping = False
    env = None
    directory = None
    if metrics is not None:
        from .metrics import MULTIPROC_ENV, serve_multiprocess

        directory = tempfile.mkdtemp(prefix="asynqpy-metrics-")
        env = {**os.environ, MULTIPROC_ENV: directory}
        serve_multiprocess(metrics[1], metrics[0], directory)

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, env=env)

    def gone(pid: int) -> None:
        if directory is not None:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]  # (its gauge)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    procs: list[subprocess.Popen[bytes]] = []
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        procs.extend(start() for _ in range(n))
        log.info("supervisor started %d worker processes: %s", n, [p.pid for p in procs])
        while True:
            alive = 0
            for i, p in enumerate(procs):
                code = p.poll()
                if code is None:
                    alive += 1
                elif not stopping:
                    log.warning("worker process %d exited with code %s; restarting it", p.pid, code)
                    gone(p.pid)
                    time.sleep(restart_backoff)
                    if not stopping:
                        procs[i] = start()
                        alive += 1
            if stopping and alive == 0:
                return 0
            time.sleep(0.2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
