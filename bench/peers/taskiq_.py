# requires: taskiq==0.13.0 taskiq-redis==1.2.4
"""taskiq adapter. Configuration: taskiq-redis RedisStreamBroker on stream `bench` (the broker the
taskiq-redis README puts first; ListQueueBroker is its "no acknowledgements" option: LPUSH/BRPOP,
a task is lost if the worker dies), i.e. XADD to enqueue, XREADGROUP (count 100, block 2 s) and
XACK after the task (ack type when_saved, the default), no result backend; async task `noop`.
The worker is what `taskiq worker --workers 1 --max-async-tasks C` runs in its one child process
(taskiq.cli.worker.run.start_listen, called in the adapter's own process; it stops on SIGTERM),
log level WARNING, socket_timeout=None on the broker's pool (see the code). Batch mode: taskiq
has no batch enqueue; it is asyncio.gather over chunks of 100 kiq() calls. Delays: the Redis
broker has no per-task delay (taskiq schedules through a schedule source plus a separate
`taskiq scheduler` process), so delayed produce is unsupported."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from importlib.metadata import version
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import Board, begin, emit, pace
from taskiq_redis import RedisStreamBroker

CONFIG = __doc__
BOARD: Board | None = None
SLEEP = 0.0
WRITE: Any = None  # --redis-write: the handler's own redis.asyncio.Redis
CHUNK = 100


def main() -> None:
    global BOARD, SLEEP, WRITE
    a = begin("taskiq", f"taskiq {version('taskiq')}, taskiq-redis {version('taskiq-redis')}", CONFIG, one_process=False,
              redis_write=True)
    # socket_timeout=None (redis-py < 8's default; 8.x sets 5 s): with a socket timeout redis-py sends
    # each command under asyncio.wait_for, which on Python 3.11 can swallow the cancellation the
    # receiver uses to stop its XREADGROUP loop, and the worker then never exits on SIGTERM.
    broker = RedisStreamBroker(url=a.url, queue_name="bench", socket_timeout=None)

    @broker.task(task_name="noop")
    async def noop(i: int) -> None:
        assert BOARD is not None
        BOARD.hit(i)
        if WRITE is not None:
            await WRITE.incr("bench:writes")
        if SLEEP:
            await asyncio.sleep(SLEEP)

    @broker.task(task_name="warmup")
    async def warmup(i: int) -> None:
        pass

    BOARD = Board(a.board) if a.board else None
    if a.command == "enqueue":

        async def enqueue() -> float:
            await broker.startup()  # creates the consumer group, as a worker would
            await warmup.kiq(-1)
            t = time.perf_counter()
            if a.mode == "single":
                for i in range(a.n):
                    await noop.kiq(i)
            else:
                for start in range(0, a.n, CHUNK):
                    await asyncio.gather(*(noop.kiq(i) for i in range(start, min(a.n, start + CHUNK))))
            s = time.perf_counter() - t
            await broker.shutdown()
            return s

        emit({"seconds": asyncio.run(enqueue())})
    elif a.command == "produce":
        assert BOARD is not None
        if a.delay_s > 0:
            emit({"unsupported": "taskiq-redis has no per-task delay: scheduling needs a schedule source "
                                 "and a separate `taskiq scheduler` process"})
            return

        loop = asyncio.new_event_loop()  # one loop, driven by common.pace between enqueues
        loop.run_until_complete(broker.startup())
        loop.run_until_complete(warmup.kiq(-1))
        pace(a.n, a.interval_ms, lambda i: loop.run_until_complete(noop.kiq(i)), BOARD)
        loop.run_until_complete(broker.shutdown())
        loop.close()
        emit({})
    elif a.command == "worker":
        assert BOARD is not None
        from taskiq.cli.common_args import LogLevel
        from taskiq.cli.worker.args import WorkerArgs
        from taskiq.cli.worker.run import start_listen

        SLEEP = a.sleep_ms / 1000
        if a.redis_write:
            from redis.asyncio import Redis as AsyncRedis

            WRITE = AsyncRedis.from_url(a.url)  # connects on first use, in the worker's loop
        args = WorkerArgs(broker=broker, modules=[], workers=1, max_async_tasks=a.concurrency,  # type: ignore[arg-type]
                          log_level=LogLevel.WARNING, configure_logging=False)
        start_listen(args)  # installs SIGTERM/SIGINT handlers: stop fetching, finish running tasks, exit


if __name__ == "__main__":
    main()

