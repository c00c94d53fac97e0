"""What task logs cost Redis: commands and Redis CPU per task (INFO commandstats after CONFIG
RESETSTAT, script-internal commands included) and the stored task's size, for N tasks kept with a
retention that fail once then succeed (two attempts: a retry write, a complete write), run by an
in-process server in three ways: logs off; ``capture_logs=True`` with handlers that log nothing;
and handlers that write 5 lines with ``task.log`` and 5 captured ``logging`` records per attempt.

    python bench/task_logs.py [N]          (default 500; starts its own redis-server)

The lines ride the writes that end the attempts, so the command counts match (the background
loops' polls, a few per second, make them differ by a handful); the difference is in bytes.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, ServeMux, Server, Task  # noqa: E402
from asynqpy.core.spine.keys import queue_keys  # noqa: E402

log = logging.getLogger("bench.app")
log.setLevel(logging.INFO)


def run(url: str, n: int, mode: str) -> dict[str, float]:
    r = redis.Redis.from_url(url)
    r.flushall()
    mux = ServeMux()
    done = 0

    @mux.handle("t")
    async def t(task: Task) -> None:
        nonlocal done
        if mode == "logging":
            for i in range(5):
                task.log(f"step {i} of task {task.id}")
                log.info("record %d of attempt %d", i, task.retry_count + 1)
        if task.retry_count == 0:
            raise ValueError("once")
        done += 1

    with Client(url) as c:
        c.enqueue_many([("t", i, {"retention": 3600, "retry_delay": 0}) for i in range(n)])
    r.config_resetstat()

    async def serve() -> None:
        server = Server(url, concurrency=20, capture_logs=mode != "off")
        running = asyncio.create_task(server.arun(mux))
        while done < n:
            await asyncio.sleep(0.01)
        server.stop()
        await running

    asyncio.run(serve())
    stats: dict[str, Any] = r.info("commandstats")
    calls = sum(int(v["calls"]) for v in stats.values())
    usec = sum(int(v["usec"]) for v in stats.values())
    tasks = queue_keys("default").tasks
    sizes = [r.hstrlen(tasks, k) for k in r.hkeys(tasks)[:100]]
    return {"cmds/task": calls / n, "redis us/task": usec / n, "stored bytes/task": sum(sizes) / len(sizes)}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    logging.getLogger("asynqpy").setLevel(logging.ERROR)  # (each first attempt fails on purpose)
    proc = RedisProcess()
    try:
        print(f"{n} tasks, 2 attempts each (retry, then complete with a retention)")
        print(f"{'mode':<22}{'cmds/task':>10}{'redis us/task':>15}{'stored bytes/task':>19}")
        for mode in ("off", "capture, no lines", "logging"):
            got = run(proc.url, n, {"off": "off", "capture, no lines": "capture", "logging": "logging"}[mode])
            print(f"{mode:<22}{got['cmds/task']:>10.2f}{got['redis us/task']:>15.1f}{got['stored bytes/task']:>19.0f}")
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
