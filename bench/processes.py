"""Durable processes: inputs/s with the inputs spread over 1, 100 and 10 000 processes, and the
latency of a call_process round trip.

    python bench/processes.py [--n 10000] [--concurrency 10]

Starts its own redis-server on a free loopback port. For each process count P it starts P
processes (their init inputs run first), then queues n call inputs round-robin over them (with
enqueue_many), and one in-process worker drains them: each input is a dequeue, a read of the
process (proc_read, one call per dequeued batch) and a commit (proc_commit, one call per written
batch: the state, one event, the key's release). Prints
inputs/s from the first call to the last, and beside it the plain keyed tasks of bench/keyed.py's
kind over the same keys (a dequeue and a done) and the ratio, so the process's own cost shows
(bench/scale_procs.py gives the cost per input in commands and CPU). Then 500
sequential call_process round trips (enqueue, run, commit, reply) on one process: p50 and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import AsyncClient, Client, Input, Process, ServeMux, Server, Step, Task  # noqa: E402
from asynqpy.core.processes.model import input_payload, key_of  # noqa: E402

Q = "pb"


def make_mux(counted: list[float], target: int, done: asyncio.Event) -> ServeMux:
    mux = ServeMux()

    @mux.process("acct")
    async def acct(p: Process, i: Input) -> Step:
        if i.kind == "init":
            return Step(state={"n": 0})
        counted.append(time.perf_counter())
        if len(counted) == target:
            done.set()
        return Step(events=[i.args], state={"n": p.state["n"] + 1}, response=p.state["n"] + 1)

    @mux.handle("t")
    async def t(task: Task) -> None:
        counted.append(time.perf_counter())
        if len(counted) == target:
            done.set()

    return mux


async def drain(url: str, n: int, procs: int, concurrency: int, plain: bool) -> float:
    redis.Redis.from_url(url).flushall()
    counted: list[float] = []
    done = asyncio.Event()
    server = Server(url, queues=[Q], concurrency=concurrency)
    run = asyncio.create_task(server.arun(make_mux(counted, n, done)))
    with Client(url) as c:
        if not plain:
            for i in range(procs):
                c.start_process("acct", f"a{i}", queue=Q)
        for start in range(0, n, 1000):
            if plain:
                items = [("t", None, {"key": f"a{i % procs}"}) for i in range(start, min(n, start + 1000))]
            else:
                items = [("process:acct", input_payload(f"a{i % procs}", "call", i), {"key": key_of(f"a{i % procs}")})
                         for i in range(start, min(n, start + 1000))]
            c.enqueue_many(items, queue=Q)
    await asyncio.wait_for(done.wait(), 600)
    server.stop()
    await run
    return (n - 1) / (counted[-1] - counted[0])


async def calls(url: str, rounds: int) -> list[float]:
    redis.Redis.from_url(url).flushall()
    server = Server(url, queues=[Q], concurrency=10)
    run = asyncio.create_task(server.arun(make_mux([], -1, asyncio.Event())))
    client = AsyncClient(url)
    await client.start_process("acct", "one", queue=Q)
    took = []
    for i in range(rounds + 20):
        t0 = time.perf_counter()
        await client.call_process("one", i, queue=Q, timeout=10)
        if i >= 20:  # warm-up left out
            took.append((time.perf_counter() - t0) * 1000)
    await client.close()
    server.stop()
    await run
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=10)
    args = ap.parse_args()
    server = RedisProcess()
    try:
        for procs in (1, 100, 10_000):
            n = min(args.n, 3000) if procs == 1 else max(args.n, procs)
            rate = asyncio.run(drain(server.url, n, procs, args.concurrency, False))
            plain = asyncio.run(drain(server.url, n, procs, args.concurrency, True))
            print(f"{procs:>6,} process(es): {n:,} call inputs, {rate:,.0f} inputs/s "
                  f"(plain keyed tasks over as many keys: {plain:,.0f}/s; ratio {rate / plain:.2f})")
        took = asyncio.run(calls(server.url, 500))
        q = statistics.quantiles(took, n=100)
        print(f"call_process round trip (500 sequential calls, one process): p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
