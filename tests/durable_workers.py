"""A durable function run by worker processes in tests/test_durable_crash.py. Each step body
records its run in Redis db 1 of the server named by $ASYNQPY_TEST_URL (hash ``effects``: step name
-> times its body ran; set ``keys:<step>``: the ``ctx.step_id`` each run saw), and hangs once after
its side effect if the test set ``hang:<step>`` (the worker is SIGKILLed there: between the step's
end and the commit of its record)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import redis

from asynqpy import Durable, ServeMux

mux = ServeMux()


def _db1() -> redis.Redis:
    return redis.Redis.from_url(os.environ["ASYNQPY_TEST_URL"].rsplit("/", 1)[0] + "/1")


def effect(ctx: Durable, name: str) -> Callable[[], str]:
    def body() -> str:
        r = _db1()
        r.hincrby("effects", name, 1)
        r.sadd(f"keys:{name}", ctx.step_id)
        if r.delete(f"hang:{name}"):
            r.set("hanging", name)
            time.sleep(60)
        return name

    return body


@mux.durable(name="crashy", queue="dq")
async def crashy(ctx: Durable, nap: float) -> list[str]:
    out = [await ctx.step("a", effect(ctx, "a"))]
    await ctx.sleep(nap)
    out.append(await ctx.step("b", effect(ctx, "b")))
    out.append(await ctx.step("c", effect(ctx, "c")))
    return out
