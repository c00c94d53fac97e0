# requires: bullmq==3.4.4
"""BullMQ (Python package) adapter. Configuration: Queue `bench` (key prefix `bull`), jobs named
`noop` with data {"i": i} and removeOnComplete=True (BullMQ's auto-removal guide; completed jobs
are otherwise kept in Redis forever), other job options default (1 attempt). One Worker in one
process with concurrency C (asyncio, async processor), defaults otherwise (lockDuration 30 s,
stalledInterval 30 s, drainDelay 5 s), closed gracefully (worker.close()) on SIGTERM. Batch mode:
Queue.addBulk over chunks of 1000 (one MULTI/EXEC pipeline of the add-job script per chunk).
Delays: the job option delay=ms (the delayed set, promoted by the worker). As shipped, the Python
Worker never reads the Redis version, keeps its conservative capability flags and so rounds each
blocking wait up to whole seconds: a delayed job can start up to ~1 s late."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from importlib.metadata import version

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bullmq import Queue, Worker
from common import Board, begin, emit, pace

CONFIG = __doc__
OPTS = {"removeOnComplete": True}


def main() -> None:
    a = begin("BullMQ (Python)", f"bullmq {version('bullmq')}", CONFIG, one_process=False)
    board = Board(a.board) if a.board else None
    if a.command == "enqueue":

        async def enqueue() -> float:
            queue = Queue("bench", {"connection": a.url})
            await queue.add("warmup", {"i": -1}, OPTS)  # connect and load the Lua scripts first
            t = time.perf_counter()
            if a.mode == "single":
                for i in range(a.n):
                    await queue.add("noop", {"i": i}, OPTS)
            else:
                for start in range(0, a.n, 1000):
                    await queue.addBulk([{"name": "noop", "data": {"i": i}, "opts": OPTS}
                                         for i in range(start, min(a.n, start + 1000))])
            s = time.perf_counter() - t
            await queue.close()
            return s

        emit({"seconds": asyncio.run(enqueue())})
    elif a.command == "produce":
        assert board is not None
        loop = asyncio.new_event_loop()  # one loop, driven by common.pace between enqueues
        queue = Queue("bench", {"connection": a.url})
        loop.run_until_complete(queue.add("warmup", {"i": -1}, OPTS))
        opts = {**OPTS, "delay": int(a.delay_s * 1000)} if a.delay_s > 0 else OPTS
        pace(a.n, a.interval_ms, lambda i: loop.run_until_complete(queue.add("noop", {"i": i}, opts)), board)
        loop.run_until_complete(queue.close())
        loop.close()
        emit({})
    elif a.command == "worker":
        assert board is not None
        sleep = a.sleep_ms / 1000

        async def process(job, token):  # type: ignore[no-untyped-def]
            if job.name == "noop":
                board.hit(job.data["i"])
                if sleep:
                    await asyncio.sleep(sleep)

        async def work() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, stop.set)
            loop.add_signal_handler(signal.SIGINT, stop.set)
            worker = Worker("bench", process, {"connection": a.url, "concurrency": a.concurrency})
            await stop.wait()
            await worker.close()

        asyncio.run(work())


if __name__ == "__main__":
    main()
