"""The ``spans`` fixture of the tracing tests (test_otel, test_durable_tracing): asynqpy instrumented
with an OpenTelemetry SDK tracer provider whose spans go to an in-memory exporter (yielded; its
``provider`` attribute is the provider, for a handler's or a step's own spans), uninstrumented after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from asynqpy.otel import instrument, uninstrument


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(tracer_provider=provider)
    exporter.provider = provider  # type: ignore[attr-defined]
    try:
        yield exporter
    finally:
        uninstrument()
