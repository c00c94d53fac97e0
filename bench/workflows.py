"""Workflows: what an edge (``after=``) costs and how fast a parent's end releases its child.

    python bench/workflows.py [--pairs 300] [--edges 2000]

Starts its own redis-server on a free loopback port and one in-process worker (concurrency 10).
Prints:
- release latency: a parent's handler returns -> its child's handler starts (p50/p99/max over
  ``--pairs`` parent/child pairs in two queues, one pair at a time: the outcome's write, the
  outbox entry, the propagator's resolve and the child's dequeue);
- enqueue: tasks/s for ``enqueue`` with one parent (registration + store, two round trips) against
  a plain ``enqueue``;
- Redis commands per edge (every command Redis executed, script-internal ones included), from a
  run of ``--edges`` children each waiting on one parent, against the same tasks without edges.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector, ServeMux, Server, Task  # noqa: E402


def commands(r: redis.Redis) -> int:
    return int(r.info("stats")["total_commands_processed"])


async def latency(url: str, pairs: int) -> list[float]:
    ended: dict[str, float] = {}
    started: dict[str, float] = {}
    mux = ServeMux()

    @mux.handle("parent")
    async def parent(task: Task) -> int:
        await asyncio.sleep(0.005)
        ended[task.id] = time.perf_counter()
        return 1

    @mux.handle("child")
    async def child(task: Task) -> None:
        started[task.payload] = time.perf_counter()

    server = Server(url, queues=["wf-p", "wf-c"], concurrency=10)
    run = asyncio.create_task(server.arun(mux))
    out = []
    with Client(url) as c:
        for _ in range(pairs):
            p = c.enqueue("parent", None, queue="wf-p")
            c.enqueue("child", p.id, queue="wf-c", after=p)
            t0 = time.monotonic()
            while p.id not in started and time.monotonic() - t0 < 10:
                await asyncio.sleep(0.0005)
            out.append((started[p.id] - ended[p.id]) * 1000)
    server.stop()
    await run
    return out


def enqueue_rates(url: str, n: int) -> tuple[float, float]:
    with Client(url) as c:
        parents = [c.enqueue("parent", None, queue="wf-e") for _ in range(n)]
        t = time.perf_counter()
        for _ in parents:
            c.enqueue("child", None, queue="wf-e")
        plain = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for p in parents:
            c.enqueue("child", None, queue="wf-e", after=p)
        edged = n / (time.perf_counter() - t)
    return plain, edged


async def drain(url: str, n: int, edges: bool) -> int:
    r = redis.Redis.from_url(url)
    r.flushall()
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        return None

    with Client(url) as c, Inspector(url) as insp:
        parents = [c.enqueue("t", None, queue="wf-d") for _ in range(n)]
        for p in parents:
            c.enqueue("t", None, queue="wf-d", after=p if edges else None)
        before = commands(r)
        server = Server(url, queues=["wf-d"], concurrency=10)
        run = asyncio.create_task(server.arun(mux))
        while insp.queue_info("wf-d").processed_total < 2 * n:
            await asyncio.sleep(0.05)
        server.stop()
        await run
        return commands(r) - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--edges", type=int, default=2000)
    args = ap.parse_args()
    server = RedisProcess()
    try:
        lat = sorted(asyncio.run(latency(server.url, args.pairs)))
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(f"release latency (parent returns -> child starts), {len(lat)} pairs: p50 {statistics.median(lat):.2f} ms, "
              f"p99 {p99:.2f} ms, max {lat[-1]:.2f} ms")
        plain, edged = enqueue_rates(server.url, args.edges)
        print(f"enqueue: plain {plain:,.0f}/s, with one parent (after=) {edged:,.0f}/s")
        with_edges = asyncio.run(drain(server.url, args.edges, True))
        without = asyncio.run(drain(server.url, args.edges, False))
        print(f"Redis commands to run {args.edges} parents and {args.edges} children: {with_edges:,} with an edge "
              f"each, {without:,} without ({(with_edges - without) / args.edges:.1f} more per edge, "
              "enqueue not counted)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
