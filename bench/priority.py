"""Benchmark: priorities at 10^6 pending tasks (no O(n) step: taking the next task costs the same
with a thousand tasks waiting as with a million).

    python bench/priority.py [--pending 1000000] [--take 20000] [--batch 10]

Starts its own redis-server on a free loopback port. For two queues, one of default-priority tasks
only and one whose tasks have random priorities 0..9, it fills --pending tasks with enqueue_many
(rate printed), then times --take tasks dequeued --batch at a time (one dequeue script call per
batch, as a worker makes) twice: with --pending tasks waiting, and with 1000 waiting. It checks
that the tasks came out highest priority first, FIFO within a priority.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client  # noqa: E402
from asynqpy.core.model.codec import decode  # noqa: E402
from asynqpy.core.spine.broker import Broker  # noqa: E402
from asynqpy.redisio.executor import SyncExecutor  # noqa: E402


def fill(c: Client, queue: str, n: int, prioritized: bool, seq: list[int]) -> float:
    rnd = random.Random(7)
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        items: list[tuple[str, list[int]] | tuple[str, list[int], dict[str, int]]] = []
        for _ in range(start, min(n, start + 1000)):
            p = rnd.randrange(10) if prioritized else 5
            items.append(("t", [p, seq[0]], {"priority": p}) if p != 5 else ("t", [p, seq[0]]))
            seq[0] += 1
        c.enqueue_many(items, queue=queue)
    return n / (time.perf_counter() - t0)


def take(ex: SyncExecutor, b: Broker, queue: str, n: int, batch: int) -> tuple[float, list[list[int]]]:
    got: list[list[int]] = []
    t0 = time.perf_counter()
    while len(got) < n:
        d = ex.run(b.dequeue(queue, batch, 600_000, "bench001"))
        got += [decode(m).payload for _, m in d.tasks]
    return n / (time.perf_counter() - t0), got


def ordered(tasks: list[list[int]]) -> bool:
    """Highest priority first, FIFO (by enqueue sequence) within a priority."""
    return all((-a[0], a[1]) < (-b[0], b[1]) for a, b in zip(tasks, tasks[1:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--take", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=10)
    a = ap.parse_args()
    server = RedisProcess()
    try:
        r = redis.Redis.from_url(server.url)
        ex, b = SyncExecutor(r), Broker()
        with Client(r) as c:
            print(f"{'queue':<28} {'enqueue/s':>10} {'take/s at ' + format(a.pending, ','):>18} "
                  f"{'take/s at 1,000':>16}  ordered")
            for name, prioritized in (("default priority only", False), ("random priorities 0..9", True)):
                queue = "prio" if prioritized else "plain"
                seq = [0]
                rate_in = fill(c, queue, a.pending, prioritized, seq)
                rate_big, first = take(ex, b, queue, a.take, a.batch)
                r.delete(*(f"asynqpy:{{{queue}}}:{k}" for k in ("t", "pending", "prio", "lease", "events")))
                fill(c, queue, 1000 + a.take, prioritized, seq)
                rate_small, _ = take(ex, b, queue, a.take, a.batch)
                ok = ordered(first) if prioritized else all(x[1] < y[1] for x, y in zip(first, first[1:]))
                print(f"{name:<28} {rate_in:>10,.0f} {rate_big:>18,.0f} {rate_small:>16,.0f}  {'yes' if ok else 'NO'}")
                r.delete(*(f"asynqpy:{{{queue}}}:{k}" for k in ("t", "pending", "prio", "lease", "events")))
        print(f"(tasks taken {a.batch} per dequeue call, {a.take:,} per figure; one redis-server on loopback)")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
