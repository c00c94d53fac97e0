"""Benchmark: a queue's limits across four workers (four Servers, each with its own connections).

    python bench/limits.py [--seconds 10] [--rate 50] [--concurrency 3]

Starts its own redis-server on a free loopback port.
1. Rate: the queue limited to --rate starts per second (--burst, default 2), 4 workers of concurrency 10,
   plenty of tasks queued: the observed start rate over --seconds (after the first second), and
   the Redis commands per second the workers spend meanwhile (they wait for the next token rather
   than poll).
2. Concurrency: the queue limited to --concurrency, 4 workers of concurrency 10, tasks of 50 ms:
   the most tasks ever running at once, and the throughput.
3. Concurrency across processes: the same limit and tasks, served by 1, 2 and 4 worker processes
   (each a Server of concurrency 10 in its own process, as `asynqpy worker --processes N` starts
   them), with fair dispatch (one task per dequeue: the default with --processes) and greedy:
   tasks/s over --mp-seconds once they run. A limited queue should run at its limit however many
   processes serve it (before issue 29 item 27, fair dispatch fell to 3 tasks/s with 4 processes).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector, ServeMux, Server, Task  # noqa: E402


async def run_servers(url: str, mux: ServeMux, seconds: float) -> None:
    servers = [Server(url, queues={"limited": 1}, concurrency=10, shutdown_timeout=1) for _ in range(4)]
    runs = [asyncio.create_task(s.arun(mux)) for s in servers]
    await asyncio.sleep(seconds)
    for s in servers:
        s.stop()
    await asyncio.gather(*runs)


def serve_process(url: str, fair: bool, seconds: float) -> None:
    """One worker process: a Server of concurrency 10 on the limited queue, tasks of 50 ms."""
    logging.getLogger("asynqpy").setLevel(logging.ERROR)  # (a loaded machine's stall warnings at start)
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        await asyncio.sleep(0.05)

    async def main() -> None:
        server = Server(url, queues={"limited": 1}, concurrency=10, shutdown_timeout=1, fair_dispatch=fair)
        run = asyncio.create_task(server.arun(mux))
        await asyncio.sleep(seconds)
        server.stop()
        await run

    asyncio.run(main())


def processes_case(url: str, concurrency: int, seconds: float) -> None:
    """Part 3 of the module docstring."""
    r = redis.Redis.from_url(url)
    spawn = multiprocessing.get_context("spawn")
    for fair in (True, False):
        figures = []
        for n in (1, 2, 4):
            r.flushall()
            with Inspector(url) as insp, Client(url) as c:
                insp.set_limits("limited", concurrency=concurrency)
                c.enqueue_many([("t", i) for i in range(int(concurrency / 0.05 * (seconds + 6)))], queue="limited")
            procs = [spawn.Process(target=serve_process, args=(url, fair, seconds + 5)) for _ in range(n)]
            for p in procs:
                p.start()
            with Inspector(url) as insp:
                deadline = time.monotonic() + 30
                while len(insp.servers()) < n and time.monotonic() < deadline:  # all up and serving
                    time.sleep(0.05)
                time.sleep(1)
                first = insp.queue_info("limited").processed_total
                time.sleep(seconds)
                last = insp.queue_info("limited").processed_total
            for p in procs:
                p.join(30)
            figures.append(f"{n} process{'es' if n > 1 else ''} {(last - first) / seconds:.1f}")
        print(f"concurrency limit {concurrency}, 50 ms tasks, {'fair' if fair else 'greedy'} dispatch: "
              f"{', '.join(figures)} tasks/s (the ceiling is {concurrency / 0.05:.0f}/s)")


def commands(r: redis.Redis) -> int:
    return sum(v["calls"] for v in r.info("commandstats").values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--mp-seconds", type=float, default=4.0, help="the window of part 3 (per process count)")
    ap.add_argument("--burst", type=int, default=2,
                    help="the token bucket's size (1: the strictest spacing; starts lost to late workers are not "
                         "made up, so the rate falls a few percent short)")
    a = ap.parse_args()
    server = RedisProcess()
    try:
        r = redis.Redis.from_url(server.url)
        starts: list[float] = []
        mux = ServeMux()

        @mux.handle("t")
        async def t(task: Task) -> None:
            starts.append(time.monotonic())

        with Inspector(server.url) as insp, Client(server.url) as c:
            insp.set_limits("limited", rate=a.rate, burst=a.burst)
            c.enqueue_many([("t", i) for i in range(int(a.rate * (a.seconds + 3)))], queue="limited")
        r.config_resetstat()
        t0 = time.monotonic()
        asyncio.run(run_servers(server.url, mux, a.seconds + 1.5))
        cmds = commands(r)
        window = [s for s in starts if t0 + 1 <= s < t0 + 1 + a.seconds]
        print(f"rate limit {a.rate:g}/s (burst {a.burst}), 4 workers: {len(window) / a.seconds:.2f} starts/s over {a.seconds:g} s "
              f"({100 * (len(window) / a.seconds / a.rate - 1):+.1f} %); Redis commands "
              f"{cmds / (a.seconds + 1.5):.0f}/s in all, {cmds / max(len(starts), 1):.1f} per task started")

        r.flushall()
        state: dict[str, Any] = {"now": 0, "max": 0, "done": 0}
        mux2 = ServeMux()

        @mux2.handle("t")
        async def held(task: Task) -> None:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            await asyncio.sleep(0.05)
            state["now"] -= 1
            state["done"] += 1

        with Inspector(server.url) as insp, Client(server.url) as c:
            insp.set_limits("limited", concurrency=a.concurrency)
            c.enqueue_many([("t", i) for i in range(2000)], queue="limited")
        asyncio.run(run_servers(server.url, mux2, 5))
        print(f"concurrency limit {a.concurrency}, 4 workers of concurrency 10, 50 ms tasks: at most "
              f"{state['max']} running at once; {state['done'] / 5:.1f} tasks/s (the ceiling is "
              f"{a.concurrency / 0.05:.0f}/s)")
        processes_case(server.url, a.concurrency, a.mp_seconds)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
