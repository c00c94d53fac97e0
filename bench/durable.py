"""Durable functions (docs/durable.md), stage 1 figures:

    python bench/durable.py [--steps 50] [--runs 20] [--replay 1000]

Starts its own redis-server on a free loopback port and one in-process worker. Prints:
- the time a step costs in one run (a run of ``--steps`` steps, end to end: each step is an input,
  a dequeue, the process's read, the step, the commit, and the forward of the 0 s continuation timer);
- short runs (3 steps each) completed per second with ``--runs`` runs at once;
- the worker CPU a replay of a run with ``--replay`` completed steps costs (the function run from the
  top against its history, no I/O): what each input of such a run pays before its new step.
Issue 46's targets: a step <= 2 round trips, a replay of 1 000 steps <= 20 ms of CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import msgpack

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import AsyncClient, Durable, Input, Process, ServeMux, Server  # noqa: E402
from asynqpy.core.durable.replay import DurableFunction  # noqa: E402
from asynqpy.core.processes.model import Event  # noqa: E402

Q = "db"
mux = ServeMux()


def one(k: int) -> int:
    return k


@mux.durable(name="steps", queue=Q)
async def steps(ctx: Durable, n: int) -> int:
    total = 0
    for k in range(n):
        total += await ctx.step(f"s{k}", one, k)
    return total


async def end_to_end(url: str, n: int, runs: int) -> None:
    server = Server(url, queues=[Q], shutdown_timeout=1, concurrency=max(10, runs))
    worker = asyncio.create_task(server.arun(mux))
    async with AsyncClient(url) as client:
        t0 = time.perf_counter()
        run = await client.start(steps, n)
        assert await client.result(run, timeout=600) == sum(range(n))
        per_step = (time.perf_counter() - t0) / n
        print(f"one run of {n} steps: {per_step * 1000:.1f} ms a step")
        t0 = time.perf_counter()
        started = [await client.start(steps, 3) for _ in range(runs)]
        await asyncio.gather(*(client.result(r, timeout=600) for r in started))
        print(f"{runs} runs of 3 steps at once: {runs / (time.perf_counter() - t0):.1f} runs/s")
    server.stop()
    await worker


async def replay_cpu(n: int) -> None:
    fn: DurableFunction = steps
    events = [{"k": "start", "a": [n + 1]}] + [{"k": "step", "i": k + 1, "n": f"s{k}", "v": k, "a": 1} for k in range(n)]
    at = datetime.now(timezone.utc)
    packed = [msgpack.packb(e) for e in events]
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()  # (the events decoded as an input's read does, then the replay)
        history = [Event(i + 1, at, "x", "call", msgpack.unpackb(b)) for i, b in enumerate(packed)]
        p = Process("r", fn.type, "running", {"status": "running"}, len(history), history)
        step = await fn.process(p, Input("timeout", None, "t", 1))
        best = min(best, time.process_time() - t0)
    assert step.events and step.events[-1]["k"] == "step"  # it replayed n steps, then ran the next one
    print(f"replay of {n} completed steps: {best * 1000:.1f} ms of CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--replay", type=int, default=1000)
    a = ap.parse_args()
    asyncio.run(replay_cpu(a.replay))
    proc = RedisProcess()
    try:
        asyncio.run(end_to_end(proc.url, a.steps, a.runs))
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
