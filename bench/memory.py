"""Memory (issue 45 target 6): bytes of Redis memory per pending task, and a worker's RSS over a
long drain.

    python bench/memory.py [--pending 100000] [--drain 1000000] [--every 2]

On a redis-server this starts: ``--pending`` no-op tasks (an int payload, default options, one
queue) enqueued in batches of 1 000, ``used_memory`` after minus before over their number; then
``--drain`` tasks queued and drained by one worker process (``Server``, concurrency 10, a no-op
handler), its RSS (``/proc/PID/status`` VmRSS) sampled every ``--every`` s with the tasks done so
far. Prints the figure, the first and last samples, and the largest RSS after the first tenth of
the drain against the one at that point (flat: they differ by little). Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from redisproc import RedisProcess

from asynqpy import Client
from asynqpy.core.spine.keys import queue_keys

WORKER = r'''
import sys, logging
from asynqpy import Server, ServeMux
mux = ServeMux()
@mux.handle("noop")
async def noop(task): pass
logging.basicConfig(level=logging.ERROR)
Server(sys.argv[1], queues={"bench": 1}, concurrency=10).run(mux)
'''


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def fill(c: Client, n: int) -> None:
    for s in range(0, n, 1000):
        c.enqueue_many([("noop", i) for i in range(s, min(n, s + 1000))], queue="bench")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pending", type=int, default=100_000)
    ap.add_argument("--drain", type=int, default=1_000_000)
    ap.add_argument("--every", type=float, default=2.0)
    a = ap.parse_args()
    srv = RedisProcess()
    try:
        r = redis.Redis.from_url(srv.url)
        c = Client(srv.url)
        c.enqueue_many([("noop", 0)])  # (scripts loaded, connection made)
        r.flushall()
        before = r.info("memory")["used_memory"]
        fill(c, a.pending)
        per = (r.info("memory")["used_memory"] - before) / a.pending
        print(f"bytes per pending task: {per:.1f} ({a.pending:,} tasks)", flush=True)
        if not a.drain:
            return
        r.flushall()
        fill(c, a.drain)
        pending = queue_keys("bench").pending
        w = subprocess.Popen([sys.executable, "-c", WORKER, srv.url])
        samples: list[tuple[float, int, int]] = []
        t0 = time.monotonic()
        try:
            while True:
                time.sleep(a.every)
                left = int(r.llen(pending))
                samples.append((round(time.monotonic() - t0, 1), a.drain - left, rss_kib(w.pid)))
                if left == 0:
                    break
        finally:
            w.terminate()
            w.wait()
        print("drain samples (s, tasks done, RSS KiB): first", samples[:2], "last", samples[-2:])
        tenth = next((s for s in samples if s[1] >= a.drain // 10), samples[0])
        later = max(s[2] for s in samples if s[1] >= tenth[1])
        print(f"worker RSS: {samples[0][2]:,} KiB at the first sample, {tenth[2]:,} KiB at {tenth[1]:,} tasks, "
              f"at most {later:,} KiB after, {samples[-1][2]:,} KiB at the end ({a.drain:,} tasks, "
              f"{samples[-1][0]:.0f} s)")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
