# requires: dramatiq[redis]==2.2.1
"""Dramatiq adapter. Configuration: RedisBroker (namespace `dramatiq`, default middleware: age and
time limits, retries, callbacks, pipelines, shutdown notifications; no results backend), actor
`noop` on queue `bench`. The worker is what `dramatiq --processes 1 --threads C` runs in its one
worker process: a dramatiq.Worker with C worker threads (prefetch 2*C, worker_timeout 1000 ms,
so an idle consumer polls Redis with a backoff of up to 1 s), started in the adapter's own
process, stopped on SIGTERM. Batch mode: Dramatiq has no batch enqueue; `group(...).run()` over
chunks of 1000 sends the messages one by one. Delays: send_with_options(delay=ms) (the delay
queue `bench.DQ`, moved to `bench` by the worker when due)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import redis

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dramatiq
from common import Board, begin, emit, pace
from dramatiq import Worker, group
from dramatiq.brokers.redis import RedisBroker

CONFIG = __doc__
BOARD: Board | None = None
SLEEP = 0.0
WRITE: Any = None  # --redis-write: the handler's own redis.Redis (thread-safe pool)


def main() -> None:
    global BOARD, SLEEP, WRITE
    a = begin("Dramatiq", f"dramatiq {dramatiq.__version__}", CONFIG, one_process=False,
              redis_write=True)
    broker = RedisBroker(url=a.url)
    dramatiq.set_broker(broker)

    @dramatiq.actor(actor_name="noop", queue_name="bench")
    def noop(i: int) -> None:
        assert BOARD is not None
        BOARD.hit(i)
        if WRITE is not None:
            WRITE.incr("bench:writes")
        if SLEEP:
            time.sleep(SLEEP)

    @dramatiq.actor(actor_name="warmup", queue_name="bench")
    def warmup(i: int) -> None:
        pass

    BOARD = Board(a.board) if a.board else None
    if a.command == "enqueue":
        warmup.send(-1)  # connect and load the Lua scripts first
        t = time.perf_counter()
        if a.mode == "single":
            for i in range(a.n):
                noop.send(i)
        else:
            for start in range(0, a.n, 1000):
                group(noop.message(i) for i in range(start, min(a.n, start + 1000))).run()
        emit({"seconds": time.perf_counter() - t})
    elif a.command == "produce":
        assert BOARD is not None
        warmup.send(-1)
        delay = int(a.delay_s * 1000) if a.delay_s > 0 else None
        pace(a.n, a.interval_ms, lambda i: noop.send_with_options(args=(i,), delay=delay), BOARD)
        emit({})
    elif a.command == "worker":
        assert BOARD is not None
        SLEEP = a.sleep_ms / 1000
        if a.redis_write:
            WRITE = redis.Redis.from_url(a.url)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        worker = Worker(broker, queues={"bench"}, worker_threads=a.concurrency)
        worker.start()
        while not stop.wait(0.5):
            pass
        worker.stop(timeout=8000)
        broker.close()


if __name__ == "__main__":
    main()
