"""Keyed serial execution (``key=``): drain rate with the tasks spread over 1, 100 and 100 000 keys.

    python bench/keyed.py [--n 20000] [--concurrency 10]

Starts its own redis-server on a free loopback port. For each key count K it enqueues
max(n, K) no-op tasks round-robin over K keys (so each key's tasks queue behind each other), then
one in-process worker (concurrency 10) drains them; prints tasks/s from the first start to the
last, and the same drain without keys. With one key the tasks run strictly one at a time (one
round trip of acknowledgement and release per task); with many, the gate costs O(1) per task:
an LPOP of the key's list and an HSET in the script that ends the previous task.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, ServeMux, Server, Task  # noqa: E402


async def drain(url: str, n: int, keys: int, concurrency: int) -> float:
    redis.Redis.from_url(url).flushall()
    with Client(url) as c:
        for start in range(0, n, 1000):
            c.enqueue_many([("t", None, {"key": f"k{i % keys}"} if keys else {})
                            for i in range(start, min(n, start + 1000))], queue="kb")
    started: list[float] = []
    done = asyncio.Event()
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        started.append(time.perf_counter())
        if len(started) == n:
            done.set()

    server = Server(url, queues=["kb"], concurrency=concurrency)
    run = asyncio.create_task(server.arun(mux))
    await asyncio.wait_for(done.wait(), 600)
    server.stop()
    await run
    return (n - 1) / (started[-1] - started[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=10)
    args = ap.parse_args()
    server = RedisProcess()
    try:
        plain = asyncio.run(drain(server.url, args.n, 0, args.concurrency))
        print(f"no key: {args.n:,} tasks, {plain:,.0f} tasks/s")
        for keys in (1, 100, 100_000):
            n = max(args.n, keys) if keys > 1 else min(args.n, 5000)
            rate = asyncio.run(drain(server.url, n, keys, args.concurrency))
            print(f"{keys:>7,} key(s): {n:,} tasks, {rate:,.0f} tasks/s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
