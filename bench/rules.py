"""The rules engine: events/s through one watcher with one rule.

    python bench/rules.py [--n 50000] [--batch 100]

Starts its own redis-server on a free loopback port, LPUSHes n events ("acq/<p>/<i>") to the
input list, then runs the engine in this process until the input and taken lists are empty;
prints events/s for Resc's make (a string pushed to a list), the same guarded by a set (Resc's
dedup), and make_task (an asynqpy task per event). The issue's target: 10 000 events/s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy.core.rules.config import parse_config  # noqa: E402
from asynqpy.rules import Rules  # noqa: E402

RULES = {
    "make": {"make": {"task": "trt/${p}/${i}", "queue": "out/${p}"}},
    "make + set": {"make": {"task": "trt/${p}/${i}", "queue": "out/${p}", "set": "out/${p}/set"}},
    "make_task": {"make_task": {"type": "trt", "payload": {"p": "${p}", "i": "${i}"}, "queue": "trt"}},
}


async def drain(url: str, n: int, batch: int, rule: dict[str, object]) -> float:
    r = redis.Redis.from_url(url)
    r.flushall()
    pipe = r.pipeline(transaction=False)
    for start in range(0, n, 1000):
        pipe.lpush("in", *[f"acq/{i % 10}/{i}" for i in range(start, min(n, start + 1000))])
    pipe.execute()
    conf = parse_config({"watchers": [{"input_queue": "in", "rules": [{"name": "r", "on": r"^acq/(?P<p>\d+)/(?P<i>\d+)$",
                                                                        **rule}]}]})
    rules = Rules(conf, url, batch=batch)
    task = asyncio.create_task(rules.arun())
    t0 = time.perf_counter()
    while rules.handled < n:
        await asyncio.sleep(0.005)
    took = time.perf_counter() - t0
    rules.stop()
    await task
    assert r.llen("in") == 0 and r.llen("in/taken") == 0
    return n / took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args()
    server = RedisProcess()
    try:
        for name, rule in RULES.items():
            rate = asyncio.run(drain(server.url, args.n, args.batch, rule))
            print(f"{name:>11}: {args.n:,} events, {rate:,.0f} events/s (batch {args.batch})")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
