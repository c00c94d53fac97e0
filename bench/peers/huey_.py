# requires: huey[redis]==3.5.4 redis[hiredis]==8.1.0
"""Huey adapter (redis-py + hiredis). Configuration: RedisHuey named bench with its defaults
(blocking dequeue: BRPOP with a 1 s timeout, pickle, results stored only for non-None return
values); calling the task enqueues it (one LPUSH); delays use task.schedule(delay=D). Worker: one
huey consumer process with C worker threads (worker_type thread, the documented choice for I/O-bound
tasks), defaults otherwise; its scheduler thread moves due tasks every 1 s. Huey has no pipelined
batch enqueue: batch mode uses the task's map(), a loop of ordinary enqueues. SIGTERM stops the
consumer at once (huey's default), the orchestrator's stop signal."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import huey
import redis
from common import Board, begin, emit, pace
from huey import RedisHuey

CONFIG = __doc__
QUEUE = "bench"
BOARD: Board | None = None
SLEEP = 0.0
WRITE: Any = None  # --redis-write: the handler's own redis.Redis (thread-safe pool)


def main() -> None:
    global BOARD, SLEEP, WRITE
    a = begin("Huey", f"{huey.__version__} (redis-py {redis.__version__})", CONFIG, one_process=True,
              redis_write=True)
    BOARD = Board(a.board) if a.board else None
    app = RedisHuey(QUEUE, url=a.url)

    # Registered as "__main__.noop" in both the producer and the consumer (both run this script).
    @app.task(name="noop")
    def noop(i: int) -> None:
        assert BOARD is not None
        BOARD.hit(i)
        if WRITE is not None:
            WRITE.incr("bench:writes")
        if SLEEP:
            time.sleep(SLEEP)

    @app.task(name="warmup")
    def warmup() -> None:
        pass

    if a.command == "enqueue":
        warmup()  # connect, and run one enqueue, before anything is measured
        t = time.perf_counter()
        if a.mode == "single":
            for i in range(a.n):
                noop(i)
        else:
            for start in range(0, a.n, 1000):
                noop.map(range(start, min(a.n, start + 1000)))
        emit({"seconds": time.perf_counter() - t})
    elif a.command == "produce":
        assert BOARD is not None
        warmup()
        if a.delay_s > 0:
            pace(a.n, a.interval_ms, lambda i: noop.schedule(args=(i,), delay=a.delay_s), BOARD)
        else:
            pace(a.n, a.interval_ms, noop, BOARD)
        emit({})
    elif a.command == "worker":
        assert BOARD is not None
        SLEEP = a.sleep_ms / 1000
        if a.redis_write:
            WRITE = redis.Redis.from_url(a.url)
        consumer = app.create_consumer(workers=a.concurrency, worker_type="thread")
        consumer.run()  # handles SIGTERM (immediate stop) and SIGINT (graceful stop) itself


if __name__ == "__main__":
    main()
