"""Producers: single enqueue from one coroutine against many coroutines sharing one AsyncClient
(their enqueues coalesce into pipelined round trips), and the sync Client from one thread
against several (theirs coalesce too: a thread queued behind a round trip in flight is woken to
send the queue in one pipeline). Also prints the process CPU per enqueue and what a thread
wake-up costs on this machine, which bounds the threads' figure.

    python bench/producers.py [--n 20000] [--coroutines 100] [--threads 8] [--repeat 3]

Starts its own redis-server on a free loopback port; prints enqueues per second (best of
``--repeat``) and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import AsyncClient, Client  # noqa: E402


async def coroutines(url: str, n: int, k: int) -> float:
    async with AsyncClient(url) as c:
        await c.enqueue("warm")

        async def producer(count: int) -> None:
            for i in range(count):
                await c.enqueue("t", i)

        t0 = time.perf_counter()
        await asyncio.gather(*(producer(n // k) for _ in range(k)))
        return (n // k) * k / (time.perf_counter() - t0)


def threads(url: str, n: int, k: int) -> float:
    with Client(url) as c:
        c.enqueue("warm")

        def producer(count: int) -> None:
            for i in range(count):
                c.enqueue("t", i)

        workers = [threading.Thread(target=producer, args=(n // k,)) for _ in range(k)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return (n // k) * k / (time.perf_counter() - t0)


def thread_handoff_us(n: int = 20000) -> tuple[float, float]:
    """(wall, CPU) µs of one round trip between two threads (a lock passed back and forth): what
    waking a thread queued behind a round trip costs on this machine."""
    a, b = threading.Lock(), threading.Lock()
    a.acquire()
    b.acquire()

    def other() -> None:
        for _ in range(n):
            a.acquire()
            b.release()

    t = threading.Thread(target=other)
    t.start()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        a.release()
        b.acquire()
    t.join()
    return (time.perf_counter() - t0) / n * 1e6, (time.process_time() - c0) / n * 1e6


def cpu_per_call(url: str, n: int, k: int) -> float:
    """Process CPU µs per Client.enqueue with ``k`` threads."""
    c0 = time.process_time()
    threads(url, n, k)
    return (time.process_time() - c0) / n * 1e6


def best(runs: list[float]) -> str:
    return f"{max(runs):,.0f}/s (runs: {', '.join(f'{r:,.0f}' for r in runs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--coroutines", type=int, default=100)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    server = RedisProcess()
    try:
        one = [asyncio.run(coroutines(server.url, args.n, 1)) for _ in range(args.repeat)]
        many = [asyncio.run(coroutines(server.url, args.n, args.coroutines)) for _ in range(args.repeat)]
        t1 = [threads(server.url, args.n, 1) for _ in range(args.repeat)]
        tk = [threads(server.url, args.n, args.threads) for _ in range(args.repeat)]
        print(f"AsyncClient.enqueue, 1 coroutine:       {best(one)}")
        print(f"AsyncClient.enqueue, {args.coroutines} coroutines:   {best(many)}  ({max(many) / max(one):.1f}x)")
        print(f"Client.enqueue, 1 thread:               {best(t1)}")
        print(f"Client.enqueue, {args.threads} threads:              {best(tk)}  ({max(tk) / max(t1):.1f}x)")
        wall, cpu = thread_handoff_us()
        print(f"  process CPU per enqueue: 1 thread {cpu_per_call(server.url, args.n // 2, 1):.0f} µs, "
              f"{args.threads} threads {cpu_per_call(server.url, args.n // 2, args.threads):.0f} µs; a thread "
              f"ping-pong costs {wall:.0f} µs wall, {cpu:.0f} µs CPU here (threads share one GIL: the rate "
              "from threads is bounded by CPU per call)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
