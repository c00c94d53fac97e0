"""Batch enqueue against the bare pipelined LPUSH, interleaved in one process so both meet the
same machine weather: rounds alternate asynqpy's ``enqueue_many`` (batches of 1 000, event stream
on), the same with the queue's event stream off, and a redis-py pipeline of LPUSHes of 40-byte
values (batches of 1 000).

    python bench/batch_enqueue.py [--n 20000] [--rounds 5]

Starts its own redis-server on a free loopback port; prints tasks per second per round and the
best of each, with the ratios to the bare loop.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector  # noqa: E402

BATCH = 1000


def asynqpy_rate(c: Client, r: redis.Redis, queue: str, n: int) -> float:
    r.delete(f"asynqpy:{{{queue}}}:pending", f"asynqpy:{{{queue}}}:t", f"asynqpy:{{{queue}}}:events")
    t = time.perf_counter()
    for start in range(0, n, BATCH):
        c.enqueue_many([("noop", i) for i in range(start, min(n, start + BATCH))], queue=queue)
    return n / (time.perf_counter() - t)


def bare_rate(r: redis.Redis, n: int) -> float:
    r.delete("bare")
    value = b"x" * 40
    t = time.perf_counter()
    for start in range(0, n, BATCH):
        p = r.pipeline(transaction=False)
        for _ in range(start, min(n, start + BATCH)):
            p.lpush("bare", value)
        p.execute()
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    server = RedisProcess()
    try:
        r = redis.Redis.from_url(server.url)
        with Client(server.url) as c, Inspector(server.url) as ins:
            c.enqueue("warmup", None, queue="on")
            c.enqueue("warmup", None, queue="off")
            ins.set_events("off", 0)
            on, off, bare = [], [], []
            for i in range(args.rounds):
                on.append(asynqpy_rate(c, r, "on", args.n))
                off.append(asynqpy_rate(c, r, "off", args.n))
                bare.append(bare_rate(r, args.n))
                print(f"round {i + 1}: asynqpy {on[-1]:,.0f}/s, events off {off[-1]:,.0f}/s, bare LPUSH {bare[-1]:,.0f}/s")
        b = max(bare)
        print(f"best: asynqpy enqueue_many {max(on):,.0f}/s ({max(on) / b:.2f}x bare), with the event stream off "
              f"{max(off):,.0f}/s ({max(off) / b:.2f}x), bare pipelined LPUSH {b:,.0f}/s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
