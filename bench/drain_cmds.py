"""Redis commands per task of an in-process drain, counted exactly (INFO commandstats, reset after
the fill), the drain rate and the worker's CPU time per task (steadier than the rate on a shared VM): a quick check that a change did not add Redis work per task.

    python bench/drain_cmds.py redis://127.0.0.1:6379/0 [N]

The Redis it is given is FLUSHALLed first: use a scratch server.
"""

from __future__ import annotations

import asyncio
import sys
import time

import redis

from asynqpy import Client, ServeMux, Server, Task


def main() -> None:
    url = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    r = redis.Redis.from_url(url)
    r.flushall()
    mux = ServeMux()
    done = 0

    @mux.handle("t")
    async def t(task: Task) -> None:
        nonlocal done
        done += 1

    with Client(url) as c:
        c.enqueue_many([("t", i) for i in range(n)])
    r.config_resetstat()

    async def drain() -> None:
        server = Server(url, concurrency=10)
        running = asyncio.create_task(server.arun(mux))
        while done < n:
            await asyncio.sleep(0.01)
        server.stop()
        await running

    t0, c0 = time.perf_counter(), time.process_time()
    asyncio.run(drain())
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in r.info("commandstats").items()}
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:10]
    print(f"{sum(calls.values()) / n:.2f} Redis commands per task, {n / elapsed:,.0f} tasks/s (one process, "
          f"concurrency 10, start and stop included), worker CPU {cpu / n * 1e6:.1f} µs per task")
    print("per task:", ", ".join(f"{k} {v / n:.3f}" for k, v in top))


if __name__ == "__main__":
    main()
