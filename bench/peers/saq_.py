# requires: saq[hiredis,redis]==0.26.4 redis[hiredis]==7.4.1 typing_extensions==4.16.0
"""SAQ adapter (Redis queue; redis-py asyncio + hiredis, the redis extra caps redis-py below 8;
typing_extensions is listed because saq 0.26.4 imports it without declaring it).
Configuration: Queue.from_url, Queue.enqueue per task (one Lua script call each; payload passed as
the keyword argument i, since SAQ functions take keyword arguments only); one saq Worker process
with concurrency C (C coroutines, each blocked in BLMOVE when idle), async handler, default timers
(scheduled jobs are moved by a poll every 1 s, the worker also sweeps/reports on its timers) and
job defaults (timeout 10 s, result ttl 600 s). Delays use scheduled= (epoch seconds; passed as a
float). SAQ has no batch enqueue API (Queue.batch only groups jobs for abort-on-error): batch mode
runs asyncio.gather over chunks of 1000 Queue.enqueue calls, which SAQ itself caps at 20
concurrent Redis operations (max_concurrent_ops)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import redis
import saq
from common import Board, begin, emit, pace
from saq import Queue, Worker

CONFIG = __doc__
QUEUE = "bench"
CHUNK = 1000
BOARD: Board | None = None
SLEEP = 0.0
WRITE: Any = None  # --redis-write: the handler's own redis.asyncio.Redis


async def noop(ctx: dict[str, Any], *, i: int) -> None:
    assert BOARD is not None
    BOARD.hit(i)
    if WRITE is not None:
        await WRITE.incr("bench:writes")
    if SLEEP:
        await asyncio.sleep(SLEEP)


async def warmup(ctx: dict[str, Any]) -> None:
    pass


async def connect(url: str) -> Queue:
    queue = Queue.from_url(url, name=QUEUE)
    await queue.connect()
    await queue.enqueue("warmup")  # connect, and run one enqueue, before anything is measured
    return queue


async def enqueue(url: str, n: int, mode: str) -> float:
    queue = await connect(url)
    t = time.perf_counter()
    if mode == "single":
        for i in range(n):
            await queue.enqueue("noop", i=i)
    else:
        for start in range(0, n, CHUNK):
            await asyncio.gather(*(queue.enqueue("noop", i=i) for i in range(start, min(n, start + CHUNK))))
    seconds = time.perf_counter() - t
    await queue.disconnect()
    return seconds


async def work(url: str, concurrency: int) -> None:
    queue = Queue.from_url(url, name=QUEUE)
    await queue.connect()
    worker = Worker(queue, functions=[noop, warmup], concurrency=concurrency)
    try:
        await worker.start()  # returns after SIGTERM/SIGINT (its own signal handlers)
    finally:
        await queue.disconnect()


def main() -> None:
    global BOARD, SLEEP, WRITE
    a = begin("SAQ", f"{saq.__version__} (redis-py {redis.__version__})", CONFIG, one_process=True,
              redis_write=True)
    BOARD = Board(a.board) if a.board else None
    if a.command == "enqueue":
        emit({"seconds": asyncio.run(enqueue(a.url, a.n, a.mode))})
    elif a.command == "produce":
        assert BOARD is not None
        loop = asyncio.new_event_loop()
        queue = loop.run_until_complete(connect(a.url))
        if a.delay_s > 0:
            pace(a.n, a.interval_ms,
                 lambda i: loop.run_until_complete(queue.enqueue("noop", i=i, scheduled=time.time() + a.delay_s)),
                 BOARD)
        else:
            pace(a.n, a.interval_ms, lambda i: loop.run_until_complete(queue.enqueue("noop", i=i)), BOARD)
        loop.run_until_complete(queue.disconnect())
        loop.close()
        emit({})
    elif a.command == "worker":
        assert BOARD is not None
        SLEEP = a.sleep_ms / 1000
        if a.redis_write:
            from redis.asyncio import Redis as AsyncRedis

            WRITE = AsyncRedis.from_url(a.url)  # connects on first use, in the worker's loop
        asyncio.run(work(a.url, a.concurrency))


if __name__ == "__main__":
    main()
