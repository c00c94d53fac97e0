"""Hops: how many asynqpy functions a task passes through, counted (sys.setprofile), not read off
the code: for one ``Client.enqueue`` and for one task through a worker (fetch to written outcome).

    python bench/hops.py redis://127.0.0.1:6379/0

Figures printed: calls into asynqpy code (every function of the ``asynqpy`` package, including
the codec and the executor) and how many distinct functions those are. The worker's figures are
per task in a steady drain: (calls draining 2N tasks - calls draining N) / N, so start, stop and
the background loops' passes cancel out. The Redis it is given is FLUSHALLed: use a scratch
server.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from types import FrameType
from typing import Any

import redis

import asynqpy
from asynqpy import Client, ServeMux, Server, Task

ROOT = os.path.dirname(asynqpy.__file__)


class Profile:
    """Counts calls of functions defined under the asynqpy package."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(ROOT) and code.co_name != "<genexpr>":
                self.calls[f"{os.path.relpath(code.co_filename, ROOT)}:{code.co_qualname}"] += 1

    def __enter__(self) -> Profile:
        sys.setprofile(self)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


def enqueue_hops(url: str) -> Counter[str]:
    with Client(url) as c:
        c.enqueue("t", 0)  # warm: connection, script load
        c.enqueue("t", 1)
        with Profile() as p:
            c.enqueue("t", 2)
    return p.calls


def drain_calls(url: str, n: int) -> Counter[str]:
    r = redis.Redis.from_url(url)
    r.flushall()
    with Client(url) as c:
        c.enqueue_many([("t", i) for i in range(n)])
    mux = ServeMux()
    done = 0

    @mux.handle("t")
    async def t(task: Task) -> None:
        nonlocal done
        done += 1

    async def drain() -> Counter[str]:
        server = Server(url, concurrency=10)
        running = asyncio.create_task(server.arun(mux))
        with Profile() as p:
            while done < n:
                await asyncio.sleep(0.005)
            server.stop()
            await running
        return p.calls

    return asyncio.run(drain())


def main() -> None:
    url = sys.argv[1]
    enq = enqueue_hops(url)
    print(f"Client.enqueue: {sum(enq.values())} calls into asynqpy, {len(enq)} distinct functions")
    n = 300
    one, two = drain_calls(url, n), drain_calls(url, 2 * n)
    every = {k: (two[k] - one[k]) / n for k in two}
    per = {k: v for k, v in every.items() if v >= 0.5}  # called for (nearly) every task
    print(f"one task through a worker: {sum(every.values()):.1f} calls into asynqpy per task (batch-level "
          f"calls shared), {len(per)} distinct functions called for every task")
    if "-v" in sys.argv:
        for k, v in sorted(enq.items()):
            print(f"  enqueue {v:3d}  {k}")
        for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
            print(f"  worker {v:6.2f}  {k}")


if __name__ == "__main__":
    main()
