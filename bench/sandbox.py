"""Sandboxed handlers: the cost of running a no-op handler in a child process, and how fast a
hung one is killed after its timeout.

    python bench/sandbox.py [--n 5000]

No Redis: it drives the pool the server uses (asynqpy.worker.sandbox.SandboxPool) directly.
- overhead: n no-op runs, one at a time, through a pool of 1 child (a frame out, a frame back:
  per-run latency, p50 and mean), and n runs 8 at a time through a pool of 2 (throughput); beside
  the same no-op called in-process, for the difference;
- kill: a handler that sleeps for an hour, cancelled at its timeout (what the processor's timer
  does), 20 times: the time from the cancel to the child's exit (SIGKILL), p50 and max.
The issue's targets: <= 0.3 ms overhead per no-op task, a hung handler killed within 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sandbox_handlers

from asynqpy.core.model.codec import Message
from asynqpy.core.model.task import Task
from asynqpy.worker.sandbox import SandboxPool


def _task(i: int) -> Task:
    return Task("noop", _msg=Message(type="noop", payload=i), id=f"t{i}", queue="b")


async def overhead(n: int) -> tuple[float, float, float]:
    pool = SandboxPool(1)
    await pool.start()
    await pool.run("sandbox_handlers:noop", _task(0), 0)  # the child's imports
    took = []
    for i in range(n):
        t0 = time.perf_counter()
        await pool.run("sandbox_handlers:noop", _task(i), 0)
        took.append(time.perf_counter() - t0)
    await pool.close()
    t0 = time.perf_counter()
    for i in range(n):
        sandbox_handlers.noop(_task(i))
    inproc = (time.perf_counter() - t0) / n
    return statistics.median(took) * 1000, statistics.fmean(took) * 1000, inproc * 1000


async def throughput(n: int) -> float:
    pool = SandboxPool(2)
    await pool.start()
    await asyncio.gather(*(pool.run("sandbox_handlers:noop", _task(i), 0) for i in range(4)))
    sem = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        async with sem:
            await pool.run("sandbox_handlers:noop", _task(i), 0)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    rate = n / (time.perf_counter() - t0)
    await pool.close()
    return rate


async def kills(rounds: int) -> list[float]:
    pool = SandboxPool(1)
    await pool.start()
    out = []
    for i in range(rounds):
        child = next(iter(pool._all))
        run = asyncio.create_task(pool.run("sandbox_handlers:hang", _task(i), 0))
        await asyncio.sleep(0.2)  # it hangs
        t0 = time.perf_counter()
        run.cancel()  # what the processor's timer does at the deadline
        await asyncio.gather(run, return_exceptions=True)
        await child.proc.wait()
        out.append((time.perf_counter() - t0) * 1000)
        while len(pool._all) < 1 or pool._idle.empty():
            await asyncio.sleep(0.01)
    await pool.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5000)
    args = ap.parse_args()
    p50, mean, inproc = asyncio.run(overhead(args.n))
    print(f"no-op in a child, one at a time: p50 {p50:.3f} ms, mean {mean:.3f} ms per task "
          f"(in-process call: {inproc * 1000:.1f} us): overhead {mean - inproc:.3f} ms")
    print(f"no-op through 2 children, 8 at a time: {asyncio.run(throughput(args.n)):,.0f} tasks/s")
    k = asyncio.run(kills(20))
    print(f"hung handler killed after its cancel: p50 {statistics.median(k):.1f} ms, max {max(k):.1f} ms (20 runs)")


if __name__ == "__main__":
    main()
