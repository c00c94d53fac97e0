"""The handler run by worker processes in the fault-injection tests.

``job`` records every start and every end in a *separate* redis-server (the recorder, URL in
$ASYNQPY_RECORDER_URL), so the record survives whatever happens to the Redis under test. Payload:
``{"ms": how long to work, "fail": how many first attempts raise}``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis.asyncio as aredis

from asynqpy import App, ServeMux, Task

mux = ServeMux()
_rec: aredis.Redis | None = None


def recorder() -> aredis.Redis:
    global _rec
    if _rec is None:
        _rec = aredis.Redis.from_url(os.environ["ASYNQPY_RECORDER_URL"])
    return _rec


@mux.handle("job")
async def job(task: Task) -> str:
    """Works for ``ms`` milliseconds; the first ``fail`` attempts raise. Returns the task's id and
    attempt (its result, which callers waiting with Client.call check)."""
    p: dict[str, Any] = task.payload
    await recorder().rpush("starts", f"{task.id}|{task.retry_count}|{time.time():.6f}|{os.getpid()}")
    if p.get("ms"):
        await asyncio.sleep(p["ms"] / 1000)
    if task.retry_count < p.get("fail", 0):
        raise RuntimeError("planned failure")
    await recorder().rpush("ends", f"{task.id}|{task.retry_count}|{time.time():.6f}|{os.getpid()}")
    return f"{task.id}|{task.retry_count}"


def _aggregate(group: str, tasks: list[Task]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A group's tasks become one job that records which tasks it stands for (kept for the audit)."""
    return "job", {"ms": 20, "group": group, "members": [t.id for t in tasks]}, {"retention": 3600}


grouping = App(group_aggregator=_aggregate, group_grace_period=0.2, group_max_size=10)
"""The same handler, on workers that also aggregate groups (tests/faults/test_aggregation.py)."""
grouping.mux.handle("job", job)
