# requires: rq==3.0.0 redis[hiredis]==8.1.0
"""RQ adapter (redis-py + hiredis). Configuration: Queue.enqueue per task; batch mode is
Queue.enqueue_many with Queue.prepare_data, 1000 jobs per pipeline; delays use Queue.enqueue_in.
Worker: one SimpleWorker process, which runs jobs in the worker process itself instead of forking a
work horse per job (RQ's performance notes: about 6x faster for short jobs). RQ has no concurrency
inside a worker (one job at a time): --concurrency is ignored and every run is concurrency 1. The
worker runs with its scheduler enabled (work(with_scheduler=True): RQ forks one scheduler process,
which moves due jobs every 1 s) so that enqueue_in works; RQ stores due times in whole seconds
(truncated), so a delayed job can also start up to 1 s early. Defaults otherwise (pickle,
result_ttl 500 s, job timeout 180 s, blocking dequeue; SIGTERM lets the running job finish)."""

from __future__ import annotations

import importlib
import os
import sys
import time
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import redis
import rq
from common import Board, begin, emit, pace
from rq import Queue, SimpleWorker

CONFIG = __doc__
QUEUE = "bench"
BOARD: Board | None = None
SLEEP = 0.0
WRITE: Any = None  # --redis-write: the handler's own redis.Redis (thread-safe pool)


# RQ refuses functions of __main__, so jobs name these through this file imported as a module
# ("rq_.noop"); the worker sets that module's BOARD and SLEEP.
def noop(i: int) -> None:
    assert BOARD is not None
    BOARD.hit(i)
    if WRITE is not None:
        WRITE.incr("bench:writes")
    if SLEEP:
        time.sleep(SLEEP)


def warmup() -> None:
    pass


def main() -> None:
    a = begin("RQ", f"{rq.__version__} (redis-py {redis.__version__})", CONFIG, one_process=True,
              redis_write=True)
    tasks = importlib.import_module(os.path.splitext(os.path.basename(__file__))[0])
    noop, warmup = tasks.noop, tasks.warmup
    tasks.BOARD = BOARD = Board(a.board) if a.board else None
    conn = redis.Redis.from_url(a.url)
    q = Queue(QUEUE, connection=conn)
    if a.command == "enqueue":
        q.enqueue(warmup)  # connect, and run one enqueue, before anything is measured
        t = time.perf_counter()
        if a.mode == "single":
            for i in range(a.n):
                q.enqueue(noop, i)
        else:
            for start in range(0, a.n, 1000):
                with conn.pipeline() as pipe:
                    q.enqueue_many([Queue.prepare_data(noop, (i,)) for i in range(start, min(a.n, start + 1000))],
                                   pipeline=pipe)
                    pipe.execute()
        emit({"seconds": time.perf_counter() - t})
    elif a.command == "produce":
        assert BOARD is not None
        q.enqueue(warmup)
        if a.delay_s > 0:
            delta = timedelta(seconds=a.delay_s)
            pace(a.n, a.interval_ms, lambda i: q.enqueue_in(delta, noop, i), BOARD)
        else:
            pace(a.n, a.interval_ms, lambda i: q.enqueue(noop, i), BOARD)
        emit({})
    elif a.command == "worker":
        assert BOARD is not None
        tasks.SLEEP = a.sleep_ms / 1000
        if a.redis_write:
            tasks.WRITE = redis.Redis.from_url(a.url)
        worker = SimpleWorker([q], connection=conn)
        worker.work(with_scheduler=True, logging_level="WARNING")  # handles SIGTERM/SIGINT itself


if __name__ == "__main__":
    main()
