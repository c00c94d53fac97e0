"""Interleaved in-process A/B of the executor path (issue 44 item 5): an old ``redisio/executor.py``
(e.g. ``git show 016cfd2:asynqpy/redisio/executor.py > /tmp/executor_old.py``, the hand-mirrored
one) against the current one, on a redis-server this starts. Blocks of N calls alternate old/new
(the order flipped each round) for a sync ``Client.enqueue``, a sync ``run`` of one command, and
their asyncio twins; prints the median and least client CPU per call (process_time).

    python bench/ab_executor.py /tmp/executor_old.py [--n 1000] [--rounds 21]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

import asynqpy.redisio.executor as new  # noqa: E402
from asynqpy import AsyncClient, Client  # noqa: E402
from asynqpy.core.spine.broker import Call  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=21)
    a = p.parse_args()
    spec = importlib.util.spec_from_file_location("asynqpy.redisio.executor_old", a.old)
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    srv = RedisProcess()
    try:
        c, ac = Client(srv.url), AsyncClient(srv.url)
        ex = {"old": (old.SyncExecutor(c.redis), old.AsyncExecutor(ac.redis)),
              "new": (new.SyncExecutor(c.redis), new.AsyncExecutor(ac.redis))}
        scard = Call(int, command=("SCARD", "asynqpy:queues"))
        loop = asyncio.new_event_loop()

        def sync_enqueue(way: str) -> None:
            c._pipeline.exec = ex[way][0]
            for i in range(a.n):
                c.enqueue("t", i, queue="ab")

        def sync_run(way: str) -> None:
            for _ in range(a.n):
                ex[way][0].run(scard)

        async def aenqueue(way: str) -> None:
            ac._pipeline.exec = ex[way][1]
            for i in range(a.n):
                await ac.enqueue("t", i, queue="ab")

        async def arun(way: str) -> None:
            for _ in range(a.n):
                await ex[way][1].run(scard)

        cases: dict[str, Callable[[str], Any]] = {
            "sync enqueue": sync_enqueue, "sync run(SCARD)": sync_run,
            "async enqueue": lambda w: loop.run_until_complete(aenqueue(w)),
            "async run(SCARD)": lambda w: loop.run_until_complete(arun(w))}
        res: dict[tuple[str, str], list[float]] = {(k, w): [] for k in cases for w in ("old", "new")}
        for f in cases.values():
            f("old")
            f("new")  # warm
        for r in range(a.rounds):
            for k, f in cases.items():
                for w in ("old", "new") if r % 2 == 0 else ("new", "old"):
                    t = time.process_time()
                    f(w)
                    res[(k, w)].append((time.process_time() - t) / a.n * 1e6)
            redis.Redis.from_url(srv.url).flushall()
        for k in cases:
            o, n = res[(k, "old")], res[(k, "new")]
            print(f"{k:17} CPU µs/call  old median {statistics.median(o):6.1f} least {min(o):6.1f} | "
                  f"new median {statistics.median(n):6.1f} least {min(n):6.1f}")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
