"""Supervisor for ``asynqpy worker --processes N``: runs N worker processes, restarts one that
crashes (with a short backoff), and stops them on SIGTERM/SIGINT. With ``metrics``, it serves the
sum of its processes' metrics (worker/metrics.py): they write them to a directory of its own, named
to them by ``PROMETHEUS_MULTIPROC_DIR``.

Signals (docs/workers.md "Stopping"): one signal must mean one graceful shutdown however it is
delivered. Sent to the supervisor alone (``kill PID``), it reaches the children only through the
supervisor; sent to the process group (Ctrl-C at a terminal, dumb-init) or to every process of the
cgroup (systemd's default ``KillMode=control-group``), each child gets it directly *and* forwarded.
So the children run supervised (``Server.run(supervised=True)``): SIGTERM/SIGINT only ever start
their graceful shutdown, and "stop now" is a signal only the supervisor sends
(:data:`HURRY_SIGNAL`), when it is itself signalled a second time. Nothing depends on timing (no
"ignore a duplicate within N ms" window, which a loaded machine or a slow forward would defeat) or
on how the signal was delivered (a process group of their own would not keep systemd's cgroup
kill from reaching them)."""

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

HURRY_SIGNAL = signal.SIGUSR2
"""What the supervisor sends its worker processes when it is signalled a second time: stop now,
putting running tasks back to their queues (SIGTERM/SIGINT only start their graceful shutdown)."""


def supervise(n: int, argv: list[str], *, restart_backoff: float = 1.0,
              metrics: tuple[str, int] | None = None) -> int:
    """Run ``n`` copies of ``argv`` until SIGTERM/SIGINT; returns the exit code for the supervisor.
    ``argv`` must run its server supervised (``asynqpy worker --supervised``: see the module's
    docstring). ``metrics``: (host, port) to serve the processes' summed metrics on."""
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

    signals = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping, signals
        stopping = True
        signals += 1
        name = signal.Signals(signum).name
        if signals == 1:  # the children may have it already (a signal to the group): they take it once
            log.warning("%s: stopping the worker processes gracefully (a second signal stops them now)", name)
            forward = signal.SIGTERM
        else:
            log.warning("%s again: stopping the worker processes now (running tasks go back to their queues)", name)
            forward = HURRY_SIGNAL
        for p in procs:
            if p.poll() is None:
                p.send_signal(forward)

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
