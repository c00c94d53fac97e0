"""Benchmark: how soon does an idle asynqpy worker start a task?

    python bench/pickup.py [--tasks 200] [--interval 20] [--scheduled 50] [--delay 1.0]

It starts its own redis-server on a free loopback port (no persistence) and one asynqpy Server in a
separate process (multiprocessing, spawn). The handler records ``time.time()`` when it starts into a
shared-memory array indexed by task number, so recording costs the measured Redis nothing.

1. Pickup latency: after a warm-up and ``--idle`` seconds of idleness (default 1), the main process enqueues ``--tasks``
   tasks ``--interval`` ms apart, noting ``time.time()`` just before each ``enqueue`` call.
   latency = handler start - that time. The worker is idle between tasks (blocked in BLPOP), so
   this is the wake-up path: enqueue script -> wake list -> BLPOP returns -> dequeue -> handler.
2. Scheduled lateness: ``--scheduled`` tasks with ``process_in=--delay`` s, enqueued ``--interval``
   ms apart. lateness = handler start - (enqueue time + delay): the forwarder's precision.

Prints a table, the script calls Redis refused during the pickup part (each would be a wake-up's
dequeue that did not run: a second round trip), and writes the figures (and the raw samples) to bench/results/pickup.json.
Percentiles are nearest-rank. Both processes read the same host clock.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import multiprocessing as mp
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

WARMUP = 5


# -- the worker process ------------------------------------------------------------------------

def worker_main(url: str, starts: Any, concurrency: int, ready: Any, stop: Any, loop: str = "asyncio") -> None:
    """Run one asynqpy Server until ``stop`` is set; handler start times go to ``starts``."""
    from asynqpy import ServeMux, Server, Task

    logging.basicConfig(level=logging.WARNING, format="worker %(levelname)s %(name)s: %(message)s")
    mux = ServeMux()

    @mux.handle("bench:pickup")
    async def record(task: Task) -> None:
        t = time.time()
        i = task.payload
        if starts[i] == 0.0:  # the first start counts (a retry would not be a pickup)
            starts[i] = t

    server = Server(url, queues={"default": 1}, concurrency=concurrency)

    async def main() -> None:
        run = asyncio.create_task(server.arun(mux))
        await asyncio.sleep(0.2)
        ready.set()
        while not stop.is_set() and not run.done():
            await asyncio.sleep(0.05)
        server.stop()
        await run

    from asynqpy.server import new_event_loop

    event_loop = new_event_loop(loop)
    try:
        event_loop.run_until_complete(main())
    finally:
        event_loop.close()


# -- measuring ---------------------------------------------------------------------------------

def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (p in 0..100)."""
    s = sorted(values)
    k = max(1, math.ceil(p / 100 * len(s)))
    return s[k - 1]


def refused_scripts(r: Any) -> dict[str, int]:
    """Script calls Redis refused since its stats were reset (INFO commandstats failed_calls of
    FCALL, EVALSHA, EVAL): a wake-up's dequeue that does not run shows here (a NOSCRIPT each)."""
    stats = r.info("commandstats")
    return {k[8:]: v["failed_calls"] for k, v in stats.items()
            if k in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval") and v.get("failed_calls")}


def enqueue_paced(client: Any, first: int, count: int, interval: float, enq: list[float],
                  **options: Any) -> None:
    """Enqueue tasks first..first+count-1, ``interval`` s apart on an absolute schedule."""
    t0 = time.monotonic()
    for n in range(count):
        delay = t0 + n * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        i = first + n
        enq[i] = time.time()
        client.enqueue("bench:pickup", i, **options)


def wait_recorded(starts: Any, indexes: range, timeout: float) -> list[int]:
    """Wait until every task in ``indexes`` has a start time; return those still missing."""
    deadline = time.monotonic() + timeout
    while True:
        missing = [i for i in indexes if starts[i] == 0.0]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=200, help="tasks for the pickup latency (default 200)")
    ap.add_argument("--interval", type=float, default=20.0, help="milliseconds between enqueues (default 20)")
    ap.add_argument("--scheduled", type=int, default=50, help="scheduled tasks for the lateness (default 50)")
    ap.add_argument("--delay", type=float, default=1.0, help="process_in of the scheduled tasks, s (default 1.0)")
    ap.add_argument("--concurrency", type=int, default=10, help="the worker's concurrency (default 10)")
    ap.add_argument("--idle", type=float, default=1.0,
                    help="seconds the worker sits idle before the pickup part (default 1)")
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio",
                    help="the worker's event loop (uvloop: pip install '.[uvloop]')")
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "pickup.json")
    args = ap.parse_args()
    if args.tasks < 1 or args.scheduled < 0 or args.interval < 0 or args.delay <= 0 or args.idle < 0:
        ap.error("need --tasks >= 1, --scheduled >= 0, --interval >= 0, --delay > 0, --idle >= 0")

    import redis
    from redisproc import RedisProcess

    import asynqpy
    from asynqpy import Client

    interval = args.interval / 1000
    total = WARMUP + args.tasks + args.scheduled
    ctx = mp.get_context("spawn")
    starts = ctx.RawArray("d", total)
    enq = [0.0] * total
    ready, stop = ctx.Event(), ctx.Event()

    server = RedisProcess()
    proc = None
    client = None
    refused: dict[str, int] = {}
    try:
        redis_version = redis.Redis(port=server.port).info("server")["redis_version"]
        proc = ctx.Process(target=worker_main, args=(server.url, starts, args.concurrency, ready, stop, args.loop),
                           name="asynqpy-bench-worker")
        proc.start()
        if not ready.wait(30):
            raise RuntimeError("the worker process did not start")
        client = Client(server.url)

        # Warm-up (script loading, connections), then let the worker go idle (blocked in BLPOP).
        enqueue_paced(client, 0, WARMUP, 0.05, enq)
        if wait_recorded(starts, range(WARMUP), 10):
            raise RuntimeError("the warm-up tasks were not processed")
        time.sleep(args.idle)

        print(f"pickup: {args.tasks} tasks, {args.interval:g} ms apart, after {args.idle:g}s idle ...", flush=True)
        pick = range(WARMUP, WARMUP + args.tasks)
        meter = redis.Redis.from_url(server.url)
        meter.config_resetstat()
        enqueue_paced(client, pick.start, args.tasks, interval, enq)
        missing = wait_recorded(starts, pick, 10)
        if missing:
            raise RuntimeError(f"{len(missing)} pickup task(s) never started")
        refused = refused_scripts(meter)
        latency = [(starts[i] - enq[i]) * 1000 for i in pick]

        lateness: list[float] = []
        if args.scheduled:
            time.sleep(0.5)
            print(f"scheduled: {args.scheduled} tasks with process_in={args.delay:g}s, "
                  f"{args.interval:g} ms apart ...", flush=True)
            sched = range(pick.stop, pick.stop + args.scheduled)
            enqueue_paced(client, sched.start, args.scheduled, interval, enq, process_in=args.delay)
            missing = wait_recorded(starts, sched, args.delay + 10)
            if missing:
                raise RuntimeError(f"{len(missing)} scheduled task(s) never started")
            lateness = [(starts[i] - (enq[i] + args.delay)) * 1000 for i in sched]
    finally:
        if client is not None:
            client.close()
        stop.set()
        if proc is not None:
            proc.join(20)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        server.stop()

    def summary(values: list[float], ps: tuple[int, ...]) -> dict[str, float]:
        out = {f"p{p}_ms": round(percentile(values, p), 3) for p in ps}
        out.update(min_ms=round(min(values), 3), mean_ms=round(sum(values) / len(values), 3),
                   max_ms=round(max(values), 3))
        return out

    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "asynqpy": asynqpy.__version__,
        "python": platform.python_version(),
        "redis_server": redis_version,
        "platform": platform.platform(),
        "cpus": mp.cpu_count(),
        "worker": {"concurrency": args.concurrency, "processes": 1},
        "pickup": {"tasks": args.tasks, "interval_ms": args.interval, "idle_before_s": args.idle,
                   **summary(latency, (50, 90, 99)),
                   "samples_ms": [round(v, 3) for v in latency], "refused_script_calls": refused},
    }
    if lateness:
        result["scheduled"] = {"tasks": args.scheduled, "interval_ms": args.interval, "delay_s": args.delay,
                               **summary(lateness, (50, 99)), "samples_ms": [round(v, 3) for v in lateness]}

    print()
    print(f"asynqpy {asynqpy.__version__} ({args.loop} loop), Python {platform.python_version()}, redis-server {redis_version}, "
          f"1 worker process (concurrency {args.concurrency})")
    rows = [("pickup latency", f"{args.tasks} tasks, {args.interval:g} ms apart", result["pickup"])]
    if lateness:
        rows.append(("scheduled lateness", f"{args.scheduled} tasks, process_in={args.delay:g}s",
                     result["scheduled"]))
    print(f"{'measure':<20} {'workload':<28} {'p50':>8} {'p99':>8} {'max':>8} {'min':>8}  (ms)")
    for name, load, r in rows:
        print(f"{name:<20} {load:<28} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['max_ms']:8.2f} {r['min_ms']:8.2f}")

    print(f"script calls Redis refused during the pickup part: {refused or 'none'}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
