"""A/B of a worker's CPU per task between source trees (e.g. a ``git archive`` of two commits):
each round drains N pre-enqueued no-op tasks with one worker process per tree, in a rotating
order (a machine that drifts over a run then favours no tree), and prints the worker's CPU time
per task (user + sys, from /proc) and the drain rate.

    python bench/ab_worker.py redis://127.0.0.1:6379/0 /tmp/trees/base /tmp/trees/new [--n 40000] [--rounds 4]

Each tree is put first on PYTHONPATH (its ``asynqpy`` and ``lua/``); the Redis given is flushed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import redis

WORKER = """
import sys
from asynqpy import ServeMux, Server, Task
mux = ServeMux()
@mux.handle("t")
async def t(task: Task) -> None:
    pass
Server(sys.argv[1], queues={"bench": 1}, concurrency=10, heartbeat_interval=1).run(mux)
"""
NEUTRAL = str(Path(__file__).resolve().parent / "peers")
"""The children's working directory: ``python -c`` puts its own first on sys.path, so run from the
repository's root a child would import that checkout's asynqpy, whatever PYTHONPATH names."""
TASKS = "asynqpy:{bench}:t"


def _cpu(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def one(url: str, tree: str, n: int) -> tuple[float, float]:
    """(worker CPU µs per task, tasks/s) for one drain of ``n`` tasks with ``tree``'s code."""
    r = redis.Redis.from_url(url)
    r.flushall()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", "import sys; from asynqpy import Client; Client(sys.argv[1]).enqueue_many("
                    f"[('t', i) for i in range({n})], queue='bench')", url], env=env, check=True, cwd=NEUTRAL)
    p = subprocess.Popen([sys.executable, "-c", WORKER, url], env=env, stderr=subprocess.DEVNULL, cwd=NEUTRAL)
    try:
        while r.hlen(TASKS) == n:
            time.sleep(0.002)
        c0, t0 = _cpu(p.pid), time.monotonic()
        while r.hlen(TASKS) > 0:
            time.sleep(0.005)
        dt, dc = time.monotonic() - t0, _cpu(p.pid) - c0
    finally:
        p.terminate()
        p.wait()
    return dc / n * 1e6, n / dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--n", type=int, default=40_000)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    cpu: dict[str, list[float]] = {t: [] for t in a.trees}
    rate: dict[str, list[float]] = {t: [] for t in a.trees}
    for rnd in range(a.rounds):
        order = a.trees[rnd % len(a.trees):] + a.trees[:rnd % len(a.trees)]
        for tree in order if rnd % 2 == 0 else order[::-1]:
            us, per_s = one(a.url, tree, a.n)
            cpu[tree].append(us)
            rate[tree].append(per_s)
            print(f"round {rnd} {tree}: worker {us:.1f} µs/task, {per_s:,.0f} tasks/s", flush=True)
    for tree in a.trees:
        print(f"{tree}: worker µs/task {sorted(round(x, 1) for x in cpu[tree])}, "
              f"tasks/s {sorted(round(x) for x in rate[tree])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
