"""Supervisor for ``asynqpy worker --processes N``: runs N worker processes, restarts one that
crashes (with a short backoff), and forwards SIGTERM/SIGINT so all of them shut down gracefully."""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from types import FrameType

log = logging.getLogger("asynqpy.supervisor")


def supervise(n: int, argv: list[str], *, restart_backoff: float = 1.0) -> int:
    """Run ``n`` copies of ``argv`` until SIGTERM/SIGINT; returns the exit code for the supervisor."""
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    procs: list[subprocess.Popen[bytes]] = []
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        procs.extend(subprocess.Popen(argv) for _ in range(n))
        log.info("supervisor started %d worker processes: %s", n, [p.pid for p in procs])
        while True:
            alive = 0
            for i, p in enumerate(procs):
                code = p.poll()
                if code is None:
                    alive += 1
                elif not stopping:
                    log.warning("worker process %d exited with code %s; restarting it", p.pid, code)
                    time.sleep(restart_backoff)
                    if not stopping:
                        procs[i] = subprocess.Popen(argv)
                        alive += 1
            if stopping and alive == 0:
                return 0
            time.sleep(0.2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
