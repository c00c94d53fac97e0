"""Queues served by pattern (issue 32): how soon a server with ``queues={"t-*": 1}`` runs the
first task of a queue that did not exist before, and what the discovery costs an idle server.

    python bench/discovery.py [--queues 50] [--known 0,1000]

Starts its own redis-server on a free loopback port. With ``--known K`` queues already known
(each with one finished task, not matching the pattern), one in-process server serving ``t-*``;
then, one at a time, a task is enqueued to a new queue ``t-<i>`` and the time until its handler
starts is taken (the enqueue's own time included). Prints p50 / p99 / max over ``--queues`` new
queues, and the commands per second Redis runs for the idle server with the pattern and with the
same queues named (``INFO commandstats``, script-internal commands included, over 5 s).
The target: every new queue served within 1 s of its first task.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import AsyncClient, Client, ServeMux, Server, Task  # noqa: E402


def _calls(r: object) -> int:
    stats = r.info("commandstats")  # type: ignore[attr-defined]
    return sum(int(v["calls"]) for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config"))


async def first_task(url: str, n: int) -> list[float]:
    started: dict[str, float] = {}
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        started.setdefault(task.queue, time.perf_counter())

    server = Server(url, queues={"t-*": 1}, heartbeat_interval=1.0)
    running = asyncio.create_task(server.arun(mux))
    client = AsyncClient(url)
    waits: list[float] = []
    try:
        await asyncio.sleep(1.0)  # started and idle
        for i in range(n):
            q = f"t-{i}"
            t0 = time.perf_counter()
            await client.enqueue("t", i, queue=q)
            while q not in started:
                if time.perf_counter() - t0 > 10:
                    raise RuntimeError(f"queue {q} not served after 10 s")
                await asyncio.sleep(0.001)
            waits.append(started[q] - t0)
            await asyncio.sleep(random.uniform(0.05, 0.6))  # (not in step with the server's looks)
    finally:
        server.stop()
        await running
        await client.close()
    return waits


async def idle(url: str, queues: dict[str, int], seconds: float) -> float:
    import redis

    r = redis.Redis.from_url(url)
    server = Server(url, queues=queues)
    running = asyncio.create_task(server.arun(ServeMux()))
    try:
        await asyncio.sleep(2.0)  # its start's first passes
        r.config_resetstat()
        await asyncio.sleep(seconds)
        return _calls(r) / seconds
    finally:
        server.stop()
        await running


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=50, help="new queues, one after the other")
    ap.add_argument("--known", default="0,1000", help="queues known before (comma-separated sizes)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"{'known queues':>12} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'idle cmds/s: pattern':>21} {'named':>6}")
    for known in (int(k) for k in args.known.split(",")):
        rp = RedisProcess()
        try:
            with Client(rp.url) as c:
                for i in range(known):
                    c.enqueue("other", i, queue=f"other-{i}")
            waits = sorted(asyncio.run(first_task(rp.url, args.queues)))
            p99 = waits[min(len(waits) - 1, int(0.99 * len(waits)))]
            served = {f"t-{i}": 1 for i in range(args.queues)}
            pattern = asyncio.run(idle(rp.url, {"t-*": 1}, 5.0))
            named = asyncio.run(idle(rp.url, served, 5.0))
            print(f"{known:>12,} {statistics.median(waits) * 1000:>8.1f} {p99 * 1000:>8.1f} {waits[-1] * 1000:>8.1f} "
                  f"{pattern:>21.1f} {named:>6.1f}", flush=True)
        finally:
            rp.stop()


if __name__ == "__main__":
    main()
