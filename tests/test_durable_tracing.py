"""Traces of durable runs (issue 46: "one trace per run, a span per step"; docs/tracing.md
"Durable runs", core/durable/traced.py) with the OpenTelemetry SDK's in-memory exporter: a run
whose inputs are replayed by two workers one after the other (a step, a failed attempt and its
retry, a ctx.task, a sleep, a wait and a signal) is one trace: a span per input (``durable
<function>``), all under the run's first, whose trace context the run's state keeps; a span per
step attempt, task, sleep and wait done, with the run, position, name and attempt, a failed attempt
an error; completed steps replayed by later inputs make no span again; a step's own spans and
the ctx.task's send and process spans nest in the run's trace."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import serving, until
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from asynqpy import AsyncClient, Durable, Inspector, Retry, ServeMux, Task

Q = "dtr"


def test_a_run_is_one_trace_with_a_span_per_input_and_per_step(backend: Any, spans: InMemorySpanExporter) -> None:
    tries: list[int] = []

    async def main() -> tuple[str, dict[str, Any]]:
        ac = AsyncClient(backend.new_async())
        mux = ServeMux()

        @mux.handle("score")
        async def score(task: Task) -> int:
            return len(task.payload)

        async def flaky() -> str:
            tries.append(1)
            with spans.provider.get_tracer("app").start_as_current_span("inside flaky"):  # type: ignore[attr-defined]
                if len(tries) == 1:
                    raise ConnectionError("first attempt fails")
            return "ok"

        @mux.durable(name="traced", queue=Q, client=ac)
        async def traced(ctx: Durable, who: str) -> list[Any]:
            a = await ctx.step("flaky", flaky, retry=Retry(attempts=2, delay=0.05))
            s = await ctx.task("score", who, queue=Q)
            await ctx.sleep(0.05)
            ev = await ctx.wait_for("go")
            return [a, s, ev]

        with Inspector(backend.sync) as insp:
            async with serving(backend.new_async(), mux, queues=[Q]):  # the first worker
                run = await ac.start("traced", "abc", id="traced:1", queue=Q)
                await until(lambda: (insp.process(Q, run.id).state or {}).get("status") == "waiting")
            async with serving(backend.new_async(), mux, queues=[Q]):  # another worker goes on
                assert await ac.signal(run, "go", "now", timeout=20) is True
                got = await ac.result(run, timeout=20)
            state = insp.process(Q, run.id).state
        await ac.close()
        return got, state

    got, state = asyncio.run(main())
    assert got == ["ok", 3, "now"] and len(tries) == 2
    finished = spans.get_finished_spans()
    inputs = [s for s in finished if s.name == "durable traced"]
    ops = [s for s in finished if s.name.startswith("durable.")]
    assert len(inputs) >= 4  # its start, the retry, the task's end, the sleep's end, the signal
    trace_id = inputs[0].context.trace_id
    assert f"{trace_id:032x}" in state["trace"]["traceparent"]  # kept in the run's record
    first = min(inputs, key=lambda s: s.start_time)
    assert all(s.context.trace_id == trace_id for s in inputs + ops)  # one trace per run
    assert all(s.parent.span_id == first.context.span_id for s in inputs if s is not first)
    assert {s.attributes["asynqpy.durable.run_id"] for s in inputs + ops} == {"traced:1"}
    assert [s.attributes["asynqpy.durable.input"] for s in sorted(inputs, key=lambda s: s.start_time)][0] == "init"
    by = sorted(ops, key=lambda s: s.start_time)
    assert [(s.name, s.attributes["asynqpy.durable.position"], s.attributes.get("asynqpy.durable.attempt"))
            for s in by] == [("durable.step flaky", 1, 1), ("durable.step flaky", 1, 2), ("durable.task score", 2, 1),
                             ("durable.sleep", 3, None), ("durable.wait go", 4, None)]  # none replayed again
    assert by[0].status.status_code is StatusCode.ERROR and by[0].attributes["error.type"] == "ConnectionError"
    assert by[1].status.status_code is not StatusCode.ERROR
    input_ids = {s.context.span_id for s in inputs}
    assert all(s.parent.span_id in input_ids for s in ops)
    inside = [s for s in finished if s.name == "inside flaky"]
    assert len(inside) == 2 and {s.parent.span_id for s in inside} == {by[0].context.span_id, by[1].context.span_id}
    task_spans = [s for s in finished if s.name in (f"send {Q}", f"process {Q}")
                  and s.attributes.get("asynqpy.task.type") == "score"]
    assert len(task_spans) == 2 and all(s.context.trace_id == trace_id for s in task_spans)
    assert states_of(inputs)[-1] == "completed"


def states_of(inputs: list[Any]) -> list[str]:
    return [s.attributes.get("asynqpy.durable.status", "") for s in sorted(inputs, key=lambda s: s.end_time)]


def test_nothing_is_traced_without_instrument(backend: Any) -> None:
    """Without instrument(), a run keeps no trace context and nothing is traced."""
    async def main() -> Any:
        mux = ServeMux()

        @mux.durable(name="plain", queue=Q)
        async def plain(ctx: Durable) -> int:
            return await ctx.step("one", lambda: 1)

        async with AsyncClient(backend.new_async()) as ac:
            async with serving(backend.new_async(), mux, queues=[Q]):
                run = await ac.start("plain", id="plain:1", queue=Q)
                assert await ac.result(run, timeout=20) == 1
        with Inspector(backend.sync) as insp:
            return insp.process(Q, "plain:1").state

    assert "trace" not in asyncio.run(main())
