"""OpenTelemetry tracing (asynqpy.otel, the ``otel`` extra): producer and consumer spans following
the messaging conventions, the trace context carried in task headers from producer to worker,
failures recorded; the SDK's in-memory exporter collects them. Without instrument() (or without
the extra) nothing is traced and nothing of OpenTelemetry is imported."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import serving, until
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from asynqpy import AsyncClient, Client, Inspector, ServeMux, Task

Q = "oq"


def test_a_trace_spans_producer_and_worker(backend: Any, spans: InMemorySpanExporter) -> None:
    mux = ServeMux()
    inner_parents: list[Any] = []

    @mux.handle("greet")
    async def greet(task: Task) -> None:
        with spans.provider.get_tracer("app").start_as_current_span("inside") as inner:  # type: ignore[attr-defined]
            inner_parents.append(inner.parent)
        if task.payload == "boom":
            raise ValueError("boom")

    async def main() -> tuple[str, str]:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            ok = c.enqueue("greet", "hi", queue=Q, headers={"tenant": "t1"})
            async with AsyncClient(backend.new_async()) as ac:
                bad = await ac.enqueue("greet", "boom", queue=Q, max_retry=0)
            assert insp.task_info(Q, ok.id).headers["tenant"] == "t1"  # the caller's headers are kept
            assert "traceparent" in insp.task_info(Q, ok.id).headers
            async with serving(backend.new_async(), mux, queues=[Q]):
                await until(lambda: insp.queue_info(Q).processed_total == 2)
                await until(lambda: len([s for s in spans.get_finished_spans() if s.name == f"process {Q}"]) == 2)
            return ok.id, bad.id

    ok_id, bad_id = asyncio.run(main())
    by = {(s.name, s.attributes.get("messaging.message.id")): s for s in spans.get_finished_spans()}
    send, process = by[(f"send {Q}", ok_id)], by[(f"process {Q}", ok_id)]
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == send.context.trace_id  # one trace from producer to worker
    assert process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    for s, op in ((send, "send"), (process, "process")):
        assert s.attributes["messaging.system"] == "asynqpy"
        assert s.attributes["messaging.operation.type"] == op
        assert s.attributes["messaging.destination.name"] == Q
        assert s.attributes["asynqpy.task.type"] == "greet"
    assert process.attributes["asynqpy.outcome"] == "succeeded"
    assert inner_parents and inner_parents[0].span_id in {by[(f"process {Q}", i)].context.span_id
                                                           for i in (ok_id, bad_id)}  # nested under process
    failed = by[(f"process {Q}", bad_id)]
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes["error.type"] == "ValueError"
    assert failed.attributes["asynqpy.outcome"] == "failed"
    assert any(e.name == "exception" for e in failed.events)


def test_batches_and_refused_enqueues_are_traced(backend: Any, spans: InMemorySpanExporter) -> None:
    from asynqpy import InvalidArgumentError

    with Client(backend.sync) as c:
        c.enqueue_many([("t", i) for i in range(3)], queue=Q)
        with pytest.raises(InvalidArgumentError):
            c.enqueue("t", queue=Q, max_retry=-1)
        with pytest.raises(InvalidArgumentError, match="headers"):
            c.enqueue("t", queue=Q, headers="not a mapping")
    got = spans.get_finished_spans()
    batch = [s for s in got if s.attributes.get("messaging.batch.message_count") == 3]
    assert len(batch) == 1 and batch[0].kind is SpanKind.PRODUCER
    refused = [s for s in got if s.status.status_code is StatusCode.ERROR]
    assert len(refused) == 2 and all(s.attributes["error.type"] == "InvalidArgumentError" for s in refused)


def test_without_instrument_nothing_is_traced_or_imported(redis_url: str) -> None:
    # (redis-py imports OpenTelemetry itself when it is installed: what matters is that asynqpy does not)
    code = ("import sys; import asynqpy.server, asynqpy.client, asynqpy.worker.processor, asynqpy.core.spine.tracing as t; "
            "assert 'asynqpy.otel' not in sys.modules and t.current is None")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    root = Path(__file__).resolve().parent.parent
    importing = sorted(str(p.relative_to(root)) for d in ("asynqpy", "cli") for p in (root / d).rglob("*.py")
                       if "opentelemetry" in p.read_text())
    assert importing == ["asynqpy/otel.py"]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    from opentelemetry import trace

    with trace.get_tracer("x", tracer_provider=provider).start_as_current_span("outer"):
        with Client(redis_url) as c:
            info = c.enqueue("t", 1, queue=Q)
    assert [s.name for s in exporter.get_finished_spans()] == ["outer"]
    with Inspector(redis_url) as insp:
        assert insp.task_info(Q, info.id).headers == {}
