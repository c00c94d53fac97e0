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

from asynqpy import App, Input, Process, ServeMux, Step, Task

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


TICKS = 3


@mux.process("ledger")
async def ledger(p: Process, i: Input) -> Step:
    """A durable process (tests/faults/test_process_kill.py): each call input appends its number
    ``n`` and adds it to the state; init starts a timer that ticks TICKS times, 0.3 s apart.
    Starts and ends are recorded like the job's (input id, attempt - 1)."""
    a: dict[str, Any] = i.args or {}
    await recorder().rpush("starts", f"{i.task_id}|{i.attempt - 1}|{time.time():.6f}|{os.getpid()}")
    if a.get("ms"):
        await asyncio.sleep(a["ms"] / 1000)
    st = dict(p.state or {"count": 0, "sum": 0, "ticks": 0})
    if i.kind == "init":
        step = Step(events=["init"], state=st, timer=0.3)
    elif i.kind == "timeout":
        st["ticks"] += 1
        step = Step(events=["tick"], state=st, timer=0.3 if st["ticks"] < TICKS else None)
    else:
        st["count"] += 1
        st["sum"] += a["n"]
        step = Step(events=[a["n"]], state=st)
    await recorder().rpush("ends", f"{i.task_id}|{i.attempt - 1}|{time.time():.6f}|{os.getpid()}")
    return step


def _aggregate(group: str, tasks: list[Task]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A group's tasks become one job that records which tasks it stands for (kept for the audit)."""
    return "job", {"ms": 20, "group": group, "members": [t.id for t in tasks]}, {"retention": 3600}


grouping = App(group_aggregator=_aggregate, group_grace_period=0.2, group_max_size=10)
"""The same handler, on workers that also aggregate groups (tests/faults/test_aggregation.py)."""
grouping.mux.handle("job", job)
