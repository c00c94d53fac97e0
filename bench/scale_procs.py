"""Durable process inputs against plain keyed tasks over the same keys (issue 31, "process inputs
>= 0.7x plain keyed tasks"): for each number of processes, n call inputs spread round-robin over
them, drained by one in-process worker (concurrency 20), and n plain keyed tasks with the same keys
drained the same way. Per input / task: every command Redis ran (script-internal ones included),
the scripts' Redis time (commandstats usec of EVALSHA), Redis's CPU (INFO cpu: user + system,
networking included), the worker's own CPU (this process: the drain only) and the rate; then the
ratio of the process's rate to the keyed one's, and of their CPU per task (Redis + worker: what
bounds a host whose cores the worker and Redis share).

    python bench/scale_procs.py [--quick] [--n N]

Starts its own redis-server on a free loopback port (no persistence).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from redis_cost import Meter, _mux, _settle  # noqa: E402
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Server  # noqa: E402
from asynqpy.core.processes.model import input_payload, key_of  # noqa: E402

log = logging.getLogger("bench.scale_procs")
Q = "rc"  # (the queue bench/redis_cost.py's helpers serve)


async def _drain(url: str, meter: Meter, n: int) -> dict[str, float]:
    done = asyncio.Event()
    meter.start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    server = Server(url, queues=[Q], concurrency=20)
    running = asyncio.create_task(server.arun(_mux(n, done)))
    await asyncio.wait_for(done.wait(), 600)
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    server.stop()
    await running
    return {**meter.stop(n), "worker_us": cpu * 1e6 / n, "rate": n / took}


def measure(url: str, procs: int, n: int, plain: bool) -> dict[str, float]:
    """Drain ``n`` inputs of ``procs`` processes (``plain``: keyed tasks of as many keys)."""
    r = redis.Redis.from_url(url)
    r.flushall()
    if not plain:  # the processes started and their inits run (not measured)
        with Client(url) as c:
            for i in range(procs):
                c.start_process("acct", f"a{i}", queue=Q)
        asyncio.run(_settle(url))
    fill: Callable[[int], tuple[str, object, dict[str, str]]] = (
        (lambda i: ("t", i, {"key": f"a{i % procs}"})) if plain else
        (lambda i: ("process:acct", input_payload(f"a{i % procs}", "call", i), {"key": key_of(f"a{i % procs}")})))
    with Client(url) as c:
        for start in range(0, n, 1000):
            c.enqueue_many([fill(i) for i in range(start, min(n, start + 1000))], queue=Q)
    return asyncio.run(_drain(url, Meter(r), n))


def rows(url: str, quick: bool, n: int = 0) -> list[dict[str, object]]:
    """One row per number of processes: the process inputs' figures, the keyed tasks', the ratios."""
    n = n or (2000 if quick else 5000)
    out: list[dict[str, object]] = []
    for procs in ((100,) if quick else (100, 1000, 10_000)):
        m = max(n, procs)
        p, k = measure(url, procs, m, False), measure(url, procs, m, True)
        row: dict[str, object] = {"processes": procs, "inputs": m}
        for name, v in (("proc", p), ("keyed", k)):
            row.update({f"{name}_cmds": round(v["cmds"], 2), f"{name}_script_us": round(v["script_us"], 1),
                        f"{name}_redis_cpu_us": round(v["cpu_us"], 1), f"{name}_worker_cpu_us": round(v["worker_us"], 1),
                        f"{name}_rate": round(v["rate"])})
        row["rate_ratio"] = round(p["rate"] / k["rate"], 2)
        row["cpu_ratio"] = round((k["cpu_us"] + k["worker_us"]) / (p["cpu_us"] + p["worker_us"]), 2)
        log.info("%s", row)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    server = RedisProcess()
    try:
        got = rows(server.url, args.quick, args.n)
    finally:
        server.stop()
    print(f"{'processes':>9} {'inputs':>7} | {'cmds':>6} {'script':>7} {'redis':>7} {'worker':>7} {'rate/s':>7} | "
          f"{'keyed cmds':>10} {'script':>7} {'redis':>7} {'worker':>7} {'rate/s':>7} | {'rate x':>6} {'cpu x':>6}")
    for r in got:
        print(f"{r['processes']:>9,} {r['inputs']:>7,} | {r['proc_cmds']:>6} {r['proc_script_us']:>7} "
              f"{r['proc_redis_cpu_us']:>7} {r['proc_worker_cpu_us']:>7} {r['proc_rate']:>7,} | {r['keyed_cmds']:>10} "
              f"{r['keyed_script_us']:>7} {r['keyed_redis_cpu_us']:>7} {r['keyed_worker_cpu_us']:>7} "
              f"{r['keyed_rate']:>7,} | {r['rate_ratio']:>6} {r['cpu_ratio']:>6}")
    print("(per input / task: cmds, script = Redis µs in scripts, redis = Redis CPU µs, worker = worker CPU µs)")


if __name__ == "__main__":
    main()
