"""Results without polling, measured: ``call()`` round trips on an idle worker, concurrent calls
from one AsyncClient, and the Redis connections they use.

    python bench/results.py [--calls 2000] [--concurrent 1000] [--repeat 3]

Starts its own redis-server (a free loopback port) and one worker process (``Server`` with a
no-op ``add`` handler, concurrency 100), then prints:
- ``call()`` round trip p50/p99 (ms), sequential, async and sync clients (the worker idle between
  calls: one enqueue, the worker's blocking pop wakes, the handler, the finishing script pushes to
  the client's inbox, the client's blocking pop returns);
- ``--concurrent`` calls awaited together from one AsyncClient: calls completed per second (best
  of ``--repeat``), and the connections that client held (its pool, counted after the run).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import AsyncClient, Client  # noqa: E402

WORKER = textwrap.dedent("""
    import sys
    from asynqpy import Server, ServeMux, Task
    mux = ServeMux()

    @mux.handle("add")
    async def add(task: Task) -> int:
        return task.payload[0] + task.payload[1]

    Server(sys.argv[1], concurrency=100).run(mux)
""")


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


async def async_round_trips(url: str, n: int) -> list[float]:
    async with AsyncClient(url) as c:
        for _ in range(50):  # warm: connections, scripts, the inbox
            await c.call("add", [1, 2], timeout=10)
        out = []
        for i in range(n):
            t0 = time.perf_counter()
            assert await c.call("add", [i, 1], timeout=10) == i + 1
            out.append((time.perf_counter() - t0) * 1000)
        return out


def sync_round_trips(url: str, n: int) -> list[float]:
    with Client(url) as c:
        for _ in range(50):
            c.call("add", [1, 2], timeout=10)
        out = []
        for i in range(n):
            t0 = time.perf_counter()
            assert c.call("add", [i, 1], timeout=10) == i + 1
            out.append((time.perf_counter() - t0) * 1000)
        return out


async def concurrent(url: str, n: int) -> tuple[float, int]:
    async with AsyncClient(url) as c:
        await c.call("add", [1, 2], timeout=10)
        t0 = time.perf_counter()
        results = await asyncio.gather(*(c.call("add", [i, 1], timeout=60) for i in range(n)))
        elapsed = time.perf_counter() - t0
        assert results == [i + 1 for i in range(n)]
        pool = c.redis.connection_pool
        return n / elapsed, len(pool._available_connections) + len(pool._in_use_connections)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--concurrent", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    redis_server = RedisProcess()
    url = redis_server.url
    worker = subprocess.Popen([sys.executable, "-c", WORKER, url])
    try:
        with Client(url) as c:  # wait for the worker
            c.call("add", [0, 0], timeout=30)
        a = asyncio.run(async_round_trips(url, args.calls))
        s = sync_round_trips(url, args.calls)
        print(f"call() round trip, idle worker, {args.calls} sequential calls:")
        for name, xs in (("AsyncClient", a), ("Client", s)):
            print(f"  {name:11} p50 {percentile(xs, 50):.2f} ms  p99 {percentile(xs, 99):.2f} ms  "
                  f"mean {statistics.fmean(xs):.2f} ms")
        runs = [asyncio.run(concurrent(url, args.concurrent)) for _ in range(args.repeat)]
        best = max(r for r, _ in runs)
        conns = max(c for _, c in runs)
        print(f"{args.concurrent} concurrent calls from one AsyncClient: {best:,.0f} calls/s (best of "
              f"{args.repeat}: {', '.join(f'{r:,.0f}' for r, _ in runs)}), {conns} Redis connection(s) "
              "held by the client")
    finally:
        worker.terminate()
        worker.wait(10)
        redis_server.stop()


if __name__ == "__main__":
    main()
