"""The durable function of the crash matrix (tests/test_durable_crash.py, issue 46's "Guarantees to
prove"): six steps, a task, a sleep, a signal wait and a gather. Every side effect is counted in
Redis db 1 of the server named by $ASYNQPY_TEST_URL (hash ``effects``: '<run>:<step>' -> times its
body ran). A run hangs once at a kill point the test names by setting ``hang:<run>:<point>`` there
(``before:<step>``, ``inside:<step>``: after the step's side effect, before its record;
``after:<step>``; ``inside:task``: in the task's handler; ``before:wait``): it adds itself to the
set ``hanging`` and waits, and the test SIGKILLs the worker once every run hangs (or sets
``release:<run>``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import redis

from asynqpy import AsyncClient, Durable, ServeMux, Task

mux = ServeMux()
_client: list[AsyncClient] = []


def _url() -> str:
    return os.environ["ASYNQPY_TEST_URL"]


def _db1() -> redis.Redis:
    return redis.Redis.from_url(_url().rsplit("/", 1)[0] + "/1")


def client() -> AsyncClient:
    if not _client:
        _client.append(AsyncClient(_url()))
    return _client[0]


async def hang(run: str, point: str) -> None:
    """Hang here if the test asked to (until it sets ``release:<run>``, or is killed)."""
    r = _db1()
    if r.delete(f"hang:{run}:{point}"):
        r.sadd("hanging", run)
        for _ in range(2400):
            await asyncio.sleep(0.05)
            try:
                if r.exists(f"release:{run}"):
                    return
            except redis.ConnectionError:
                pass  # (the Redis crash test restarts the server meanwhile)


def step(ctx: Durable, name: str) -> Any:
    run = ctx.run_id

    async def body() -> str:
        _db1().hincrby("effects", f"{run}:{name}", 1)
        await hang(run, f"inside:{name}")
        return name

    return body


@mux.handle("double")
async def double(task: Task) -> int:
    run = task.payload["run"]
    _db1().hincrby("effects", f"{run}:task", 1)
    await hang(run, "inside:task")
    return int(task.payload["n"]) * 2


@mux.durable(name="matrix", queue="dq", client=client)
async def matrix(ctx: Durable, nap: float) -> list[Any]:
    run, out = ctx.run_id, []
    for name in ("s1", "s2"):
        await hang(run, f"before:{name}")
        out.append(await ctx.step(name, step(ctx, name)))
        await hang(run, f"after:{name}")
    out.append(await ctx.task("double", {"run": run, "n": 21}, queue="dq"))
    await hang(run, "after:task")
    await ctx.sleep(nap)
    await hang(run, "before:s3")
    out.append(await ctx.step("s3", step(ctx, "s3")))
    await hang(run, "after:s3")
    await hang(run, "before:wait")
    out.append(await ctx.wait_for("go"))
    await hang(run, "before:gather")
    out += await ctx.gather(ctx.step("s4", step(ctx, "s4")), ctx.step("s5", step(ctx, "s5")))
    await hang(run, "after:gather")
    await hang(run, "before:s6")
    out.append(await ctx.step("s6", step(ctx, "s6")))
    await hang(run, "after:s6")
    return out
