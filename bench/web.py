"""Benchmark: the web console's API on a queue of 10^6 tasks (pages stay O(page)).

    python bench/web.py [--tasks 1000000] [--calls 30]

Starts its own redis-server on a free loopback port, fills one queue with --tasks pending tasks
(and a few in every other state), and times --calls requests to each endpoint through the ASGI
app in-process (FastAPI's TestClient: no network, so the figures are the console's own work plus
Redis): p50 and p99 in ms. The deep page is in the middle of the pending list, where LRANGE costs
O(offset): it is printed for honesty. A search reads at most about 10 000 tasks of the queue's
task hash per request (HSCAN), whatever its size: a type no task has costs the most.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--calls", type=int, default=30)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

    from asynqpy.web import create_app

    server = RedisProcess()
    try:
        with Client(server.url) as c, Inspector(server.url) as insp:
            for start in range(0, a.tasks, 1000):
                c.enqueue_many([("t", {"n": n}) for n in range(start, min(a.tasks, start + 1000))], queue="big")
            c.enqueue("t", "s", queue="big", process_in=3600, task_id="one")
            c.enqueue("t", "x", queue="big", task_id="arch")
            insp.archive_task("big", "arch")
        mid = a.tasks // 60 // 2 + 1
        endpoints = [
            ("GET /api/queues", "/api/queues"),
            ("GET /api/queues/big", "/api/queues/big"),
            ("GET tasks page 1 (30)", "/api/queues/big/tasks?state=pending&page=1&size=30"),
            ("GET tasks last page", f"/api/queues/big/tasks?state=pending&page={-(-a.tasks // 30)}&size=30"),
            (f"GET tasks page {mid} (middle)", f"/api/queues/big/tasks?state=pending&page={mid}&size=60"),
            ("GET one task", "/api/queues/big/tasks/one"),
            ("GET / (overview page)", "/"),
            ("GET queue page", "/queues/big?state=pending"),
            ("GET search by type (none match)", "/api/queues/big/search?type=rare"),
            ("GET search by id prefix", "/api/queues/big/search?id=one"),
            ("GET /api/history (14 days)", "/api/history?days=14"),
            ("GET /redis page", "/redis"),
        ]
        with TestClient(create_app(server.url), base_url="http://localhost") as tc:
            print(f"web console API, queue of {a.tasks:,} pending tasks, {a.calls} calls each (in-process ASGI):")
            for name, path in endpoints:
                tc.get(path)
                times = []
                for _ in range(a.calls):
                    t0 = time.perf_counter()
                    r = tc.get(path)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert r.status_code == 200, (path, r.status_code, r.text[:200])
                times.sort()
                p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
                print(f"  {name:<32} p50 {statistics.median(times):7.1f} ms   p99 {p99:7.1f} ms")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
