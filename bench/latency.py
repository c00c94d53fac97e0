"""Benchmark: what a caller waits, one call at a time, on an idle worker in its own process
(``asynqpy worker latencymux:mux``, bench/latencymux.py), on a redis-server this starts:

    python bench/latency.py [--n 200] [--runs 40]

Prints p50 / p90 / max in ms of: ``Client.call`` of a no-op task; a durable run's
``client.signal`` (the run waiting for it) and ``client.result`` right after; a run of three steps
from ``client.start`` to ``client.result`` returning (docs/durable.md). Calls are 20 ms apart (the
worker idle between them), in one sync Client.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector  # noqa: E402

Q = "lat"


def _line(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    return f"{name}: p50 {ms[len(ms) // 2]:.2f} ms, p90 {ms[int(len(ms) * 0.9)]:.2f} ms, max {ms[-1]:.2f} ms"


def _waiting(insp: Inspector, run_id: str) -> None:
    deadline = time.monotonic() + 10
    while (insp.process(Q, run_id).state or {}).get("status") != "waiting":
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} never waited for its signal")
        time.sleep(0.002)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="calls of the no-op task")
    ap.add_argument("--runs", type=int, default=40, help="durable runs of each kind")
    a = ap.parse_args()
    proc = RedisProcess()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    worker = subprocess.Popen([sys.executable, "-c", "from asynqpy.cli.main import main; main()", "worker",
                               "latencymux:mux", "-q", Q, "--redis-url", proc.url], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Client(proc.url) as c, Inspector(proc.url) as insp:
            assert c.call("echo", 0, queue=Q, timeout=30) == 0  # (the worker up)
            calls, signals, results, runs = [], [], [], []
            for i in range(a.n):
                t = time.perf_counter()
                assert c.call("echo", i, queue=Q, timeout=10) == i
                calls.append((time.perf_counter() - t) * 1000)
                time.sleep(0.02)
            for i in range(a.runs):
                run = c.start("gate", id=f"gate-{i}", queue=Q)
                _waiting(insp, run.id)
                t0 = time.perf_counter()
                c.signal(run, "go")
                t1 = time.perf_counter()
                c.result(run, timeout=10)
                t2 = time.perf_counter()
                signals.append((t1 - t0) * 1000)
                results.append((t2 - t1) * 1000)
                time.sleep(0.02)
                t0 = time.perf_counter()
                assert c.result(c.start("three", id=f"three-{i}", queue=Q), timeout=10) == 3
                runs.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.02)
        for name, ms in (("Client.call, a no-op task", calls), ("client.signal, the run waiting", signals),
                         ("client.result right after", results), ("a run of 3 steps, start -> result", runs)):
            print(_line(name, ms))
        print(f"(load {os.getloadavg()[0]:.1f})")
    finally:
        worker.terminate()
        worker.wait(10)
        proc.stop()


if __name__ == "__main__":
    main()
