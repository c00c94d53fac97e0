"""The app bench/latency.py starts in a worker process: a no-op task, a durable run that waits for
a signal, and one of three steps. bench/ is on its path (PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from asynqpy import Durable, ServeMux, Task

mux = ServeMux()
Q = "lat"


@mux.handle("echo")
async def echo(task: Task) -> Any:
    return task.payload


async def add(k: int) -> int:
    return k + 1


@mux.durable(name="gate", queue=Q)
async def gate(ctx: Durable) -> str:
    await ctx.wait_for("go")
    return ctx.run_id


@mux.durable(name="three", queue=Q)
async def three(ctx: Durable) -> int:
    a = await ctx.step("a", add, 0)
    b = await ctx.step("b", add, a)
    return await ctx.step("c", add, b)
