# requires: -e ../..  (the repository itself; see bench/run.py)
"""asynqpy adapter. Configuration: Client.enqueue / enqueue_many (pipelined); one `asynqpy worker`
process (or --processes N under the supervisor), concurrency C, async no-op handler, defaults
otherwise (lease 30 s, heartbeat 5 s, fetch_batch 32)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import Board, begin, emit, pace

import asynqpy
from asynqpy import ServeMux, Server, Task

CONFIG = __doc__


def main() -> None:
    a = begin("asynqpy", asynqpy.__version__, CONFIG, one_process=False, redis_write=True)
    board = Board(a.board) if a.board else None
    if a.command in ("enqueue", "produce"):
        from asynqpy import Client  # imported where it is used: a worker process does not load it
    if a.command == "enqueue":
        with Client(a.url) as c:
            c.enqueue("warmup", None, queue="bench")  # connect and register the queue first
            t = time.perf_counter()
            if a.mode == "single":
                for i in range(a.n):
                    c.enqueue("noop", i, queue="bench")
            else:
                for start in range(0, a.n, 1000):
                    c.enqueue_many([("noop", i) for i in range(start, min(a.n, start + 1000))], queue="bench")
            emit({"seconds": time.perf_counter() - t})
    elif a.command == "produce":
        assert board is not None
        with Client(a.url) as c:
            c.enqueue("warmup", -1, queue="bench")
            delay = a.delay_s if a.delay_s > 0 else None
            pace(a.n, a.interval_ms, lambda i: c.enqueue("noop", i, queue="bench", process_in=delay), board)
        emit({})
    elif a.command == "worker":
        assert board is not None
        mux = ServeMux()
        sleep = a.sleep_ms / 1000
        own = None
        if a.redis_write:
            import redis.asyncio

            own = redis.asyncio.Redis.from_url(a.url)  # the handler's own client, as an app would have

        @mux.handle("noop")
        async def noop(task: Task) -> None:
            board.hit(task.payload)
            if own is not None:
                await own.incr("bench:writes")
            if sleep:
                await asyncio.sleep(sleep)

        mux.handle("warmup", lambda task: None)
        if a.processes > 1:
            from asynqpy.worker.supervisor import supervise

            i = sys.argv.index("--processes")  # children: the same command without --processes N
            argv = [sys.executable, os.path.abspath(__file__), *sys.argv[1:i], *sys.argv[i + 2:]]
            sys.exit(supervise(a.processes, argv))
        Server(a.url, queues={"bench": 1}, concurrency=a.concurrency).run(mux)


if __name__ == "__main__":
    main()
