"""Benchmark: how long a Prometheus scrape of the queue metrics takes.

    python bench/metrics_scrape.py [--queues 100] [--tasks 100] [--scrapes 50]

Starts its own redis-server on a free loopback port, fills --queues queues with --tasks tasks each
(pending, scheduled, archived, completed), serves the queue metrics (as `asynqpy metrics` does)
and times --scrapes HTTP scrapes of /metrics: p50, p99, max (ms), and the body's size; and the
first scrape, which also reads every queue's memory (reused for 30 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector  # noqa: E402
from asynqpy.metrics import serve_queue_metrics  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=100)
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--scrapes", type=int, default=50)
    a = ap.parse_args()
    server = RedisProcess()
    try:
        with Client(server.url) as c, Inspector(server.url) as insp:
            for i in range(a.queues):
                q = f"q{i:03d}"
                c.enqueue_many([("t", n) for n in range(a.tasks)], queue=q)
                c.enqueue("t", "later", queue=q, process_in=3600)
                if i % 10 == 0:
                    insp.pause(q)
        httpd = serve_queue_metrics(server.url, 0)
        url = f"http://127.0.0.1:{httpd.server_port}/metrics"
        t0 = time.perf_counter()
        urllib.request.urlopen(url).read()  # the first: with the memory readings (then every 30 s)
        with_memory = (time.perf_counter() - t0) * 1000
        times = []
        size = 0
        for _ in range(a.scrapes):
            t0 = time.perf_counter()
            size = len(urllib.request.urlopen(url).read())
            times.append((time.perf_counter() - t0) * 1000)
        httpd.shutdown()
        times.sort()
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        print(f"queue metrics scrape, {a.queues} queues x {a.tasks + 1} tasks: p50 {statistics.median(times):.1f} ms, "
              f"p99 {p99:.1f} ms, max {times[-1]:.1f} ms ({size / 1024:.0f} KiB per scrape, {a.scrapes} scrapes); "
              f"the first, which also reads the memory of every queue (as one scrape in 30 s does), "
              f"{with_memory:.1f} ms")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
