"""The event stream's memory per queue at its default cap (10 000 events), under loads that feed
it differently: MEMORY USAGE of the stream (exact, SAMPLES 0), its entries and the events they
hold, after the queue saw `tasks` tasks through their lives:

    single       tasks enqueued one by one, each finished alone: an entry per event
    batch        tasks enqueued 1 000 a call, finished 20 at a time (the worker's batched
                 acknowledgement): an entry per batch
    mixed        both, interleaved (batches of 1 000, then singles)
    followed     single, with 'active' events on (a reader following the stream)
    producer     tasks enqueued 1 000 a call and not yet run (a producer ahead of its workers):
                 before the cap counted events, each entry held 1 000 ids and the stream grew
                 to 10 000 of them (~200 MB) before the cap trimmed it

The lifecycle is driven by the scripts directly (enqueue / enqueue_many, dequeue, done_many), as a
worker would, without a worker: what is measured is the stream, not the worker. The target: at
most 1 MB per queue at the default cap, whatever the load.

    python bench/scale_events.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector  # noqa: E402
from asynqpy.core.model.codec import decode  # noqa: E402
from asynqpy.core.spine.broker import Broker, Done  # noqa: E402
from asynqpy.core.spine.keys import queue_keys  # noqa: E402
from asynqpy.redisio.executor import SyncExecutor  # noqa: E402

log = logging.getLogger("bench.scale_events")
Q = "se"


def _finish(x: SyncExecutor, b: Broker, count: int, per_done: int) -> None:
    """Dequeue ``count`` tasks and acknowledge them ``per_done`` at a time."""
    left = count
    while left > 0:
        taken = x.run(b.dequeue(Q, min(per_done, left), 600_000, "tok00001")).tasks
        if not taken:
            return
        x.run(b.done_many(Q, [Done(id, "tok00001", decode(m)) for id, m in taken]))
        left -= len(taken)


def load(url: str, kind: str, tasks: int) -> dict[str, object]:
    r = redis.Redis.from_url(url)
    r.flushall()
    b, x = Broker(), SyncExecutor(r)
    if kind == "followed":
        with Inspector(url) as insp:
            try:
                insp.set_events(Q, 10_000, active=True)
            except TypeError:  # (a version before optional active events: always written)
                pass
    with Client(url) as c:
        done = 0
        while kind == "producer" and done < tasks:
            c.enqueue_many([("t", i) for i in range(1000)], queue=Q)
            done += 1000
        while done < tasks:
            if kind in ("batch", "mixed"):
                c.enqueue_many([("t", i) for i in range(1000)], queue=Q)
                _finish(x, b, 1000, 20)
                done += 1000
            if kind in ("single", "mixed", "followed"):
                for i in range(500):
                    c.enqueue("t", i, queue=Q)
                _finish(x, b, 500, 1)
                done += 500
    key = queue_keys(Q).events
    with Inspector(url) as insp:
        events = sum(1 for _ in insp.events(Q))
    mem = int(r.memory_usage(key, samples=0) or 0)
    return {"load": kind, "tasks": tasks, "entries": r.xlen(key), "events": events, "bytes": mem,
            "kb_per_queue": round(mem / 1024, 1), "gb_at_10k_queues": round(mem * 10_000 / 1e9, 2)}


def rows(url: str, quick: bool) -> list[dict[str, object]]:
    """One row per load, at the default cap, after enough tasks to fill the stream (the producer:
    100 000 tasks, 400 000 without ``quick``)."""
    tasks = 12_000 if quick else 40_000
    return [load(url, kind, tasks) for kind in ("single", "batch", "mixed", "followed")] + [
        load(url, "producer", 100_000 if quick else 400_000)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="12 000 tasks a load (default 40 000)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    server = RedisProcess()
    try:
        table = rows(server.url, args.quick)
    finally:
        server.stop()
    sys.stdout.write(f"{'load':<10}{'tasks':>8}{'entries':>9}{'events':>8}{'KB/queue':>10}{'GB at 10^4 queues':>19}\n")
    for row in table:
        sys.stdout.write(f"{row['load']!s:<10}{row['tasks']:>8,}{row['entries']:>9,}{row['events']:>8,}"
                         f"{row['kb_per_queue']:>10}{row['gb_at_10k_queues']:>19}\n")


if __name__ == "__main__":
    main()
