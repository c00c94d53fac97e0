"""Benchmark (issue 31, "queues per worker"): what one worker costs as the number of queues it
serves grows.

    python bench/scale_manyqueues.py [--quick] [--window S]

Starts its own redis-server on a free loopback port. For each number of queues K (1, 10, 100,
500, 10^4; ``--quick``: up to 500), one Server serving K queues of weight 1, default options:

- ``idle_cmds_s``: commands per second Redis runs for the idle worker (INFO commandstats, script
  internal commands included), counted over ``--window`` seconds (default 30: the janitor's
  interval) after the worker started and settled;
The consistency sweep is off (``reconcile_interval=0``): it is another row of the issue.

- ``order_ms``: worker CPU of one weighted queue order (``QueueOrder.order``) and ``first_ms`` of
  one weighted first choice among every queue (``QueueOrder.first``, where the code has it);
- ``trickle_cmds_task``: commands per task when tasks arrive one at a time, each in a random one
  of the K queues, and the worker runs each before the next is enqueued (the enqueue's own
  commands included, and whatever the idle worker spends meanwhile);
- ``start_cmds``: commands Redis runs from a worker's start until it has run one task waiting in
  each of the K queues (and ``start_s``, seconds; ``start_cpu_s``, this process's CPU seconds
  over it, the worker's; ``start_redis_s``, redis-server's): the two CPU figures hold on a loaded
  machine where the wall clock does not.

``--start-only`` prints only the start-up figures (``--sizes 1000,10000``: issue 45's target,
10^4 queues drained in at most 10x the time of 10^3).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import sys
import time
import timeit
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import AsyncClient, ServeMux, Server, Task  # noqa: E402
from asynqpy.worker import queues as queues_mod  # noqa: E402

log = logging.getLogger("bench.scale_manyqueues")

SIZES = (1, 10, 100, 500, 10_000)
QUICK_SIZES = (1, 10, 100, 500)


def _calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info"))


def _reset(r: redis.Redis) -> None:
    r.config_resetstat()


def _names(k: int) -> dict[str, int]:
    return {f"mq{i}": 1 for i in range(k)}


def _order_cpu(k: int) -> tuple[float, float]:
    order = queues_mod.QueueOrder(_names(k), False)
    reps = max(1, min(200, 20_000 // k))
    t_order = timeit.Timer(order.order, timer=time.process_time).timeit(reps) / reps * 1000  # CPU, not wall
    first = getattr(order, "first", None)
    t_first = (timeit.Timer(first, timer=time.process_time).timeit(reps) / reps * 1000 if first is not None
               else float("nan"))
    return t_order, t_first


async def _serve(url: str, queues: dict[str, int], done: list[float]) -> tuple[Server, asyncio.Task[None]]:
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        done.append(time.monotonic())

    # reconcile_interval=0: the consistency sweep (a step per queue at start, issue 31's first row,
    # reworked apart) is left out, so the figures are this row's: fetching and the per-queue chores
    server = Server(url, queues=queues, concurrency=10, shutdown_timeout=1, reconcile_interval=0)
    run = asyncio.create_task(server.arun(mux))
    return server, run


async def _stop(server: Server, run: asyncio.Task[None]) -> None:
    server.stop()
    await asyncio.gather(run, return_exceptions=True)


async def _settle(r: redis.Redis, k: int) -> None:
    """Wait out the worker's start-up (its first look at every queue, an EXISTS a queue and chore):
    until Redis runs fewer than 50 commands in a second (at most 3 + K / 50 s)."""
    await asyncio.sleep(2.0)
    deadline = time.monotonic() + 1.0 + k / 50
    while time.monotonic() < deadline:
        _reset(r)
        await asyncio.sleep(1.0)
        if _calls(r) < 50:
            return


async def _idle(url: str, r: redis.Redis, k: int, window: float) -> float:
    r.flushall()
    done: list[float] = []
    server, run = await _serve(url, _names(k), done)
    await _settle(r, k)
    _reset(r)
    await asyncio.sleep(window)
    calls = _calls(r)
    await _stop(server, run)
    return calls / window


async def _trickle(url: str, r: redis.Redis, k: int, n: int) -> float:
    r.flushall()
    names = list(_names(k))
    done: list[float] = []
    server, run = await _serve(url, _names(k), done)
    await _settle(r, k)
    client = AsyncClient(url)
    rnd = random.Random(7)
    _reset(r)
    for i in range(n):
        await client.enqueue("t", b"", queue=rnd.choice(names))
        while len(done) <= i:
            await asyncio.sleep(0.002)
    calls = _calls(r)
    await client.close()
    await _stop(server, run)
    return calls / n


def _redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _reads(r: redis.Redis) -> int:
    """Read events Redis has processed (``total_reads_processed``): ~ the round trips its clients
    made, a figure the machine's load does not change."""
    return int(r.info("stats").get("total_reads_processed", 0))


async def _start(url: str, r: redis.Redis, k: int) -> tuple[int, float, float, float, int]:
    """(commands, seconds, this process's CPU seconds, redis-server's, round trips) from a
    worker's start until it ran the one task waiting in each of ``k`` queues."""
    r.flushall()
    client = AsyncClient(url)
    for q in _names(k):
        await client.enqueue("t", b"", queue=q)
    await client.close()
    _reset(r)
    done: list[float] = []
    t0, cpu0, rcpu0, reads0 = time.monotonic(), time.process_time(), _redis_cpu(r), _reads(r)
    server, run = await _serve(url, _names(k), done)
    while len(done) < k:
        await asyncio.sleep(0.005)
        if time.monotonic() - t0 > 600:
            break
    took, cpu, rcpu = time.monotonic() - t0, time.process_time() - cpu0, _redis_cpu(r) - rcpu0
    calls, reads = _calls(r), _reads(r) - reads0 - 3  # (less this function's own three reads)
    await _stop(server, run)
    return calls, took, cpu, rcpu, reads


def start_rows(url: str, sizes: tuple[int, ...]) -> list[dict[str, object]]:
    """The start-up figures only, one row per number of queues."""
    r = redis.Redis.from_url(url)
    out: list[dict[str, object]] = []
    for k in sizes:
        cmds, took, cpu, rcpu, reads = asyncio.run(_start(url, r, k))
        row: dict[str, object] = {"queues": k, "start_cmds": cmds, "start_rtt": reads, "start_s": round(took, 2),
                                  "start_cpu_s": round(cpu, 2), "start_redis_s": round(rcpu, 2)}
        log.info("%s", row)
        out.append(row)
    return out


def rows(url: str, quick: bool, window: float | None = None, start_max: int = 10_000,
         sizes: tuple[int, ...] | None = None) -> list[dict[str, object]]:
    """One row per number of queues K (see the module docstring); the start-up figure only up to
    ``start_max`` queues (it was O(K^2) before issue 31)."""
    r = redis.Redis.from_url(url)
    window = window or (10.0 if quick else 30.0)
    out: list[dict[str, object]] = []
    for k in sizes or (QUICK_SIZES if quick else SIZES):
        order_ms, first_ms = _order_cpu(k)
        idle = asyncio.run(_idle(url, r, k, window))
        trickle = asyncio.run(_trickle(url, r, k, 30 if quick or k > 500 else 100))
        start_cmds, start_s, cpu, rcpu, _ = asyncio.run(_start(url, r, k)) if k <= start_max else (0, 0.0, 0.0, 0.0, 0)
        row: dict[str, object] = {"queues": k, "idle_cmds_s": round(idle, 2), "order_ms": round(order_ms, 4),
                                  "first_ms": round(first_ms, 4), "trickle_cmds_task": round(trickle, 1),
                                  "start_cmds": start_cmds, "start_s": round(start_s, 2),
                                  "start_cpu_s": round(cpu, 2), "start_redis_s": round(rcpu, 2)}
        log.info("%s", row)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="up to 500 queues, a 10 s idle window")
    ap.add_argument("--window", type=float, default=None, help="seconds the idle worker is counted")
    ap.add_argument("--start-max", type=int, default=10_000, help="most queues of the start-up figure")
    ap.add_argument("--sizes", default="", help="comma-separated numbers of queues (default: all)")
    ap.add_argument("--start-only", action="store_true", help="only the start-up figures")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("asynqpy").setLevel(logging.ERROR)
    rp = RedisProcess()
    try:
        sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else None
        table = (start_rows(rp.url, sizes or (1_000, 10_000)) if args.start_only
                 else rows(rp.url, args.quick, args.window, args.start_max, sizes))
    finally:
        rp.stop()
    cols = list(table[0])
    print(" ".join(f"{c:>18}" for c in cols))
    for row in table:
        print(" ".join(f"{row[c]!s:>18}" for c in cols))
    if args.start_only and len(table) > 1:
        print(ratios(table))


def ratios(table: list[dict[str, object]]) -> str:
    """The start-up figures of the last row over the first's (issue 45's target: CPU, worker plus
    redis-server, <= 10x for 10^3 -> 10^4 queues), and the machine's load (wall figures are noisy)."""
    a, b = table[0], table[-1]

    def cpu(row: dict[str, object]) -> float:
        return float(str(row["start_cpu_s"])) + float(str(row["start_redis_s"]))

    def over(col: str) -> float:
        return float(str(b[col])) / max(float(str(a[col])), 1e-9)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{a['queues']} -> {b['queues']} queues: CPU (worker + redis) x{cpu(b) / max(cpu(a), 1e-9):.1f}, "
            f"worker x{over('start_cpu_s'):.1f}, redis x{over('start_redis_s'):.1f}, "
            f"round trips x{over('start_rtt'):.1f}, commands x{over('start_cmds'):.1f}, "
            f"wall x{over('start_s'):.1f} (load {load:.1f})")


if __name__ == "__main__":
    main()
