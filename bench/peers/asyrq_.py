# requires: asyrq==0.1.7 redis[hiredis]==8.1.0
"""asyrq adapter (a Python port of Go's asynq; redis-py + hiredis). Configuration: the synchronous
``asyrq.sync.SyncClient`` (one EVALSHA per task; asyrq has no batch enqueue, so batch mode is a
loop of single enqueues); delays use ``ProcessIn(D)`` (whole seconds). Worker: one ``asyrq.Server``
(asyncio), concurrency C, queue ``bench``, async no-op handler for type ``noop``, file logging
off and log level WARNING, defaults otherwise (one dequeue script per task, a 0.1 s poll when the
queue is empty, delayed tasks forwarded every 1 s). SIGTERM stops it (its own signal handling,
graceful)."""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import time
from urllib.parse import urlsplit

import asyrq
import redis
from asyrq import Config, Context, ProcessIn, Queue, RedisClientOpt, Server, Task
from asyrq.internal.log import DefaultLogger, LogLevel
from asyrq.sync import SyncClient
from common import Board, begin, emit, pace

CONFIG = __doc__
QUEUE = "bench"


def _opt(url: str) -> RedisClientOpt:
    u = urlsplit(url)
    db = int((u.path or "/0").lstrip("/") or 0)
    return RedisClientOpt(addr=f"{u.hostname or '127.0.0.1'}:{u.port or 6379}", password=u.password or "", db=db)


def main() -> None:
    a = begin("asyrq", f"{asyrq.__version__} (redis-py {redis.__version__})", CONFIG, one_process=True,
              redis_write=True)
    board = Board(a.board) if a.board else None
    quiet = DefaultLogger(level=LogLevel.WARN, log_dir=None, name="bench")
    if a.command in ("enqueue", "produce"):
        c = SyncClient(_opt(a.url), logger=quiet)
        c.enqueue(Task("warmup", b""), Queue(QUEUE))  # connect and load the script first
        if a.command == "enqueue":
            t = time.perf_counter()
            for i in range(a.n):  # single and batch alike: asyrq has no batch enqueue
                c.enqueue(Task("noop", str(i).encode()), Queue(QUEUE))
            emit({"seconds": time.perf_counter() - t})
        else:
            assert board is not None
            if a.delay_s > 0:
                delay = max(1, round(a.delay_s))
                pace(a.n, a.interval_ms,
                     lambda i: c.enqueue(Task("noop", str(i).encode()), Queue(QUEUE), ProcessIn(delay)), board)
            else:
                pace(a.n, a.interval_ms, lambda i: c.enqueue(Task("noop", str(i).encode()), Queue(QUEUE)), board)
            emit({})
        c.close()
    elif a.command == "worker":
        assert board is not None
        sleep = a.sleep_ms / 1000
        own = None
        if a.redis_write:
            from redis.asyncio import Redis as AsyncRedis

            own = AsyncRedis.from_url(a.url)  # the handler's own client, as an app would have
        app = Server(_opt(a.url), Config(concurrency=a.concurrency, queues={QUEUE: 1}, logger=quiet,
                                         log_level=LogLevel.WARN, log_dir=None))  # type: ignore[arg-type]

        @app.task("noop")
        async def noop(ctx: Context, task: Task) -> None:
            board.hit(task.payload.decode())
            if own is not None:
                await own.incr("bench:writes")
            if sleep:
                await asyncio.sleep(sleep)

        @app.task("warmup")
        async def warmup(ctx: Context, task: Task) -> None:
            pass

        asyncio.run(app.run())


if __name__ == "__main__":
    main()
