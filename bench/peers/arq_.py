# requires: arq==0.28.0 redis[hiredis]==5.3.1
"""arq adapter (redis-py asyncio + hiredis; arq 0.28 caps redis-py below 6). Configuration: arq's
defaults, as its documentation shows them: ArqRedis.enqueue_job with random uuid4 job ids, pickle
serialization, results kept 1 h; one arq Worker process with max_jobs = C (async handler), default
retries and timeouts. arq polls its sorted-set queue (no blocking wake-up) every poll_delay = 0.5 s
(default) and reads at most queue_read_limit = max(5 C, 100) ids per poll, starting at most C of
them when handlers are busy: an idle worker sees a new job only at its next poll, and a drain is
capped near 2 x queue_read_limit jobs/s (max_jobs per poll if handlers sleep). Delays use
_defer_by. arq has no batch enqueue API (each enqueue_job is its own WATCH/MULTI transaction on its
own connection); batch mode runs asyncio.gather over chunks of 100 enqueue_job calls."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import redis
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.version import VERSION
from arq.worker import Worker
from common import Board, begin, emit, pace

CONFIG = __doc__
QUEUE = "bench"
CHUNK = 100
BOARD: Board | None = None
SLEEP = 0.0
WRITE: Any = None  # --redis-write: the handler's own redis.asyncio.Redis


async def noop(ctx: dict[str, Any], i: int) -> None:
    assert BOARD is not None
    BOARD.hit(i)
    if WRITE is not None:
        await WRITE.incr("bench:writes")
    if SLEEP:
        await asyncio.sleep(SLEEP)


async def warmup(ctx: dict[str, Any]) -> None:
    pass


async def connect(url: str) -> ArqRedis:
    pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=QUEUE)
    await pool.enqueue_job("warmup")  # connect, and run one enqueue, before anything is measured
    return pool


async def enqueue(url: str, n: int, mode: str) -> float:
    pool = await connect(url)
    t = time.perf_counter()
    if mode == "single":
        for i in range(n):
            await pool.enqueue_job("noop", i)
    else:
        for start in range(0, n, CHUNK):
            await asyncio.gather(*(pool.enqueue_job("noop", i) for i in range(start, min(n, start + CHUNK))))
    seconds = time.perf_counter() - t
    await pool.aclose()
    return seconds


def main() -> None:
    global BOARD, SLEEP, WRITE
    a = begin("arq", f"{VERSION} (redis-py {redis.__version__})", CONFIG, one_process=True,
              redis_write=True)
    BOARD = Board(a.board) if a.board else None
    if a.command == "enqueue":
        emit({"seconds": asyncio.run(enqueue(a.url, a.n, a.mode))})
    elif a.command == "produce":
        assert BOARD is not None
        loop = asyncio.new_event_loop()
        pool = loop.run_until_complete(connect(a.url))
        delay = a.delay_s if a.delay_s > 0 else None
        pace(a.n, a.interval_ms, lambda i: loop.run_until_complete(pool.enqueue_job("noop", i, _defer_by=delay)),
             BOARD)
        loop.run_until_complete(pool.aclose())
        loop.close()
        emit({})
    elif a.command == "worker":
        assert BOARD is not None
        SLEEP = a.sleep_ms / 1000
        if a.redis_write:
            from redis.asyncio import Redis as AsyncRedis

            WRITE = AsyncRedis.from_url(a.url)  # connects on first use, in the worker's loop
        asyncio.set_event_loop(asyncio.new_event_loop())
        worker = Worker(functions=[noop, warmup], queue_name=QUEUE, redis_settings=RedisSettings.from_dsn(a.url),
                        max_jobs=a.concurrency)  # handles SIGTERM/SIGINT itself
        worker.run()


if __name__ == "__main__":
    main()
