# requires: celery[redis]==5.7.0
"""Celery adapter. Configuration: the Redis broker (kombu's redis transport, list queue `bench`),
no result backend (task_ignore_result), early acks (the default), worker_prefetch_multiplier 64
(Celery's optimizing guide: a large multiplier for many short tasks). One `celery worker` process
started with worker_main: `-P threads -c C -Q bench --without-gossip --without-mingle
--without-heartbeat` (one isolated node needs no cluster chatter), log level WARNING. Batch mode:
Celery has no true batch enqueue; `group(...).apply_async()` over chunks of 1000 publishes the
messages one by one on one producer connection. Delays: apply_async(countdown=D) (the worker
holds the ETA message in memory until due)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import redis

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import celery
from celery import Celery, group
from common import Board, begin, emit, pace

CONFIG = __doc__
BOARD: Board | None = None
SLEEP = 0.0
WRITE: Any = None  # --redis-write: the handler's own redis.Redis (thread-safe pool)


def make_app(url: str) -> Celery:
    app = Celery("bench", broker=url, set_as_current=True)
    app.conf.update(
        task_default_queue="bench",
        task_ignore_result=True,
        result_backend=None,
        worker_prefetch_multiplier=64,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=True,
        worker_redirect_stdouts=False,
    )

    @app.task(name="noop")
    def noop(i: int) -> None:
        assert BOARD is not None
        BOARD.hit(i)
        if WRITE is not None:
            WRITE.incr("bench:writes")
        if SLEEP:
            time.sleep(SLEEP)

    @app.task(name="warmup")
    def warmup(i: int) -> None:
        pass

    return app


def main() -> None:
    global BOARD, SLEEP, WRITE
    a = begin("Celery", f"celery {celery.__version__}", CONFIG, one_process=False,
              redis_write=True)
    app = make_app(a.url)
    noop, warmup = app.tasks["noop"], app.tasks["warmup"]
    BOARD = Board(a.board) if a.board else None
    if a.command == "enqueue":
        warmup.apply_async((-1,))  # connect (and fill the producer pool) first
        t = time.perf_counter()
        if a.mode == "single":
            for i in range(a.n):
                noop.apply_async((i,))
        else:
            for start in range(0, a.n, 1000):
                group(noop.s(i) for i in range(start, min(a.n, start + 1000))).apply_async()
        emit({"seconds": time.perf_counter() - t})
    elif a.command == "produce":
        assert BOARD is not None
        warmup.apply_async((-1,))
        countdown = a.delay_s if a.delay_s > 0 else None
        pace(a.n, a.interval_ms, lambda i: noop.apply_async((i,), countdown=countdown), BOARD)
        emit({})
    elif a.command == "worker":
        assert BOARD is not None
        SLEEP = a.sleep_ms / 1000
        if a.redis_write:
            WRITE = redis.Redis.from_url(a.url)
        # worker_main handles SIGTERM itself (warm shutdown: finish running tasks, then exit)
        app.worker_main([
            "worker", "-P", "threads", "-c", str(a.concurrency), "-Q", "bench", "-l", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ])


if __name__ == "__main__":
    main()
