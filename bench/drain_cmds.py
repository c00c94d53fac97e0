"""Redis commands per task of an in-process drain, counted exactly (INFO commandstats, reset after
the fill), the drain rate and the worker's CPU time per task (steadier than the rate on a shared
VM), and Redis's own CPU time per task (INFO commandstats usec): with the queue's lifecycle event
stream on (the default) and off, to show what the events cost.

    python bench/drain_cmds.py redis://127.0.0.1:6379/0 [N] [--redis-write] [--uvloop]

With --uvloop the server runs on uvloop (the uvloop extra). With --redis-write the handler also does one write of its own (INCR, on its own client), as the
suite's drain+write workload does; that INCR is counted among the commands.

The Redis it is given is FLUSHALLed first: use a scratch server.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import redis

from asynqpy import Client, Inspector, ServeMux, Server, Task
from asynqpy.server import new_event_loop


def drain(url: str, n: int, events: bool, write: bool = False, loop: str = "asyncio") -> None:
    r = redis.Redis.from_url(url)
    r.flushall()
    if not events:
        with Inspector(url) as insp:
            insp.set_events("default", 0)
    mux = ServeMux()
    done = 0

    own: Any = None

    @mux.handle("t")
    async def t(task: Task) -> None:
        nonlocal done, own
        done += 1
        if write:
            if own is None:
                import redis.asyncio

                own = redis.asyncio.Redis.from_url(url)
            await own.incr("bench:writes")

    with Client(url) as c:
        c.enqueue_many([("t", i) for i in range(n)])
    r.config_resetstat()

    async def run() -> None:
        server = Server(url, concurrency=10)
        running = asyncio.create_task(server.arun(mux))
        while done < n:
            await asyncio.sleep(0.01)
        server.stop()
        await running

    t0, c0 = time.perf_counter(), time.process_time()
    event_loop = new_event_loop(loop)
    try:
        event_loop.run_until_complete(run())
    finally:
        event_loop.close()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = r.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
    usec = sum(v["usec"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:10]
    print(f"events {'on ' if events else 'off'}: {sum(calls.values()) / n:.2f} Redis commands per task, "
          f"{n / elapsed:,.0f} tasks/s (one process, concurrency 10, start and stop included), worker CPU "
          f"{cpu / n * 1e6:.1f} µs per task, Redis script time {usec / n:.1f} µs per task")
    print("  per task:", ", ".join(f"{k} {v / n:.3f}" for k, v in top))


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    url = args[0]
    n = int(args[1]) if len(args) > 1 else 5000
    write = "--redis-write" in sys.argv
    loop = "uvloop" if "--uvloop" in sys.argv else "asyncio"
    for events in (True, False, True, False):
        drain(url, n, events, write, loop)


if __name__ == "__main__":
    main()
