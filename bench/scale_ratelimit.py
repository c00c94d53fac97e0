"""Scale row "workers on a rate-limited queue" (issue 31): Redis commands and Redis CPU per task
started as the number of worker processes on one rate-limited queue grows.

    python bench/scale_ratelimit.py [--quick] [--rate 50] [--burst 2] [--seconds 4] [--greedy]

Starts its own redis-server on a free loopback port. For each size: the queue limited to
``--rate`` starts per second (``--burst``), plenty of no-op tasks queued, N worker processes (each
a Server of concurrency 10 in its own process, fair dispatch as ``asynqpy worker --processes N``
starts them; ``--greedy``: batched dequeues), all up and serving, the backlog queued, every worker
at it; then over ``--seconds``: tasks
started, Redis commands (INFO commandstats after CONFIG RESETSTAT, script-internal commands
included) and Redis µs per task started, and the start rate seen (it must stay at or under the
limit), and the Redis commands per second the same workers spend idle (empty queue: their
chores, which every worker pays on any queue; the rate's own cost per task is cmds/task less
idle_cmds/s / tasks/s). Sizes 1, 4, 16, 32 processes (``--quick``: 1, 4, 8).

Before issue 31 every worker held back by the rate came back for the next token at the same
moment (cmds per task ≈ 17 + 7.2 × processes); now one waiter is told when the next token is due
and the others sleep on the queue's wake list (docs/limits.md).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

QUEUE = "limited"


def _serve(url: str, fair: bool, stop: Any) -> None:
    """One worker process: a Server of concurrency 10 on the limited queue, no-op tasks, until ``stop``."""
    from asynqpy import ServeMux, Server, Task

    logging.getLogger("asynqpy").setLevel(logging.ERROR)
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        return None

    async def main() -> None:
        server = Server(url, queues={QUEUE: 1}, concurrency=10, shutdown_timeout=1, fair_dispatch=fair)
        run = asyncio.create_task(server.arun(mux))
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        server.stop()
        await run

    asyncio.run(main())


def _stats(r: redis.Redis) -> tuple[int, int]:
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values()), sum(int(v["usec"]) for v in stats.values())


def measure(url: str, processes: int, rate: float, burst: int, seconds: float, fair: bool = True) -> dict[str, object]:
    """One size: see the module docstring."""
    from asynqpy import Client, Inspector
    from asynqpy.core.spine.keys import queue_keys

    r = redis.Redis.from_url(url)
    r.flushall()
    with Inspector(url) as insp:
        insp.set_limits(QUEUE, rate=rate, burst=burst)
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    procs = [spawn.Process(target=_serve, args=(url, fair, stop)) for _ in range(processes)]
    for p in procs:
        p.start()
    try:
        with Inspector(url) as insp:
            deadline = time.monotonic() + 120
            while len(insp.servers()) < processes and time.monotonic() < deadline:  # all up and serving
                time.sleep(0.1)
            time.sleep(1.0)  # (each worker's start-up chores, on an empty queue)
            r.config_resetstat()
            time.sleep(2.0)
            idle, _ = _stats(r)
            with Client(url) as c:  # the tasks come once every worker is up: a backlog, held back by the rate
                c.enqueue_many([("t", i) for i in range(int(rate * (seconds + 8)) + 100)], queue=QUEUE)
            wake = queue_keys(QUEUE).wake
            for _ in range(processes):  # every worker joins, as, in a steady flow, each enqueue's
                r.lpush(wake, "1")  # wake-up token draws one more
                time.sleep(0.05)
            time.sleep(1.5)
            first = insp.queue_info(QUEUE).processed_total
            r.config_resetstat()
            t0 = time.monotonic()
            time.sleep(seconds)
            cmds, usec = _stats(r)
            if os.environ.get("SCALE_DEBUG"):  # the commands behind the figures
                top = sorted(r.info("commandstats").items(), key=lambda kv: -int(kv[1]["calls"]))[:20]
                print(processes, [(k[4:], v["calls"]) for k, v in top], file=sys.stderr)
            took = time.monotonic() - t0
            last = insp.queue_info(QUEUE).processed_total
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    started = max(last - first, 1)
    return {"processes": processes, "dispatch": "fair" if fair else "greedy", "tasks/s": round(started / took, 1),
            "limit/s": rate, "cmds/task": round(cmds / started, 1), "redis_us/task": round(usec / started, 1),
            "idle_cmds/s": round(idle / 2.0, 1)}


def rows(url: str, quick: bool, rate: float = 50.0, burst: int = 2, seconds: float = 4.0,
         fair: bool = True) -> list[dict[str, object]]:
    """One dict per number of worker processes (1, 4, 16, 32; quick: 1, 4, 8)."""
    sizes = (1, 4, 8) if quick else (1, 4, 16, 32)
    return [measure(url, n, rate, burst, seconds, fair) for n in sizes]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--burst", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--greedy", action="store_true", help="batched dequeues (fair_dispatch off)")
    a = ap.parse_args()
    from redisproc import RedisProcess

    server = RedisProcess()
    try:
        out = rows(server.url, a.quick, a.rate, a.burst, a.seconds, not a.greedy)
    finally:
        server.stop()
    cols = list(out[0])
    print("  ".join(f"{c:>13}" for c in cols))
    for row in out:
        print("  ".join(f"{row[c]!s:>13}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
