"""OpenTelemetry tracing (the ``otel`` extra: opentelemetry-api; you bring the SDK and exporter).

    from asynqpy.otel import instrument
    instrument()                      # the global TracerProvider; or instrument(tracer_provider=...)

Then every ``enqueue`` makes a producer span ``send <queue>`` and carries its trace context to the
worker in the task's headers (W3C ``traceparent``/``tracestate``, through the configured
propagator), and every attempt a worker runs is a consumer span ``process <queue>``, a child of
the producer's span with a link to it, current while the handler runs (the handler's own spans
nest under it). Attributes follow the OpenTelemetry messaging conventions: ``messaging.system``
("asynqpy"), ``messaging.operation.type`` / ``messaging.operation.name`` (send / process),
``messaging.destination.name`` (the queue), ``messaging.message.id`` (the task id),
``messaging.batch.message_count`` (a batch), plus ``asynqpy.task.type`` and
``asynqpy.task.retry_count``. A failed attempt records the exception and sets the span's status to
error with ``error.type``. :func:`uninstrument` turns it off. Without the extra installed and
:func:`instrument` called, asynqpy imports nothing of OpenTelemetry and traces nothing.
"""

from __future__ import annotations

from typing import Any

from .core.model.codec import Message
from .core.model.errors import InvalidArgumentError
from .core.spine import tracing

SYSTEM = "asynqpy"


class OpenTelemetryTracing:
    """:class:`asynqpy.core.spine.tracing.Tracing` on the OpenTelemetry API."""

    def __init__(self, tracer_provider: Any = None) -> None:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:
            raise InvalidArgumentError("tracing needs OpenTelemetry: "
                                       "pip install '.[otel]' in asynqpy's repository") from None
        from . import __version__

        self._trace, self._context, self._propagate = trace, context, propagate
        self.tracer = trace.get_tracer("asynqpy", __version__, tracer_provider=tracer_provider)

    def send(self, queue: str, task_type: str, headers: dict[str, str] | None) -> tuple[Any, dict[str, str]]:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.operation.type": "send", "messaging.operation.name": "send",
            "messaging.destination.name": queue, "asynqpy.task.type": task_type,
        }
        span = self.tracer.start_span(f"send {queue}", kind=self._trace.SpanKind.PRODUCER, attributes=attributes)
        carrier = dict(headers or {})
        self._propagate.inject(carrier, context=self._trace.set_span_in_context(span))
        return span, carrier

    def sent(self, span: Any, task_id: str | None, error: BaseException | None, count: int = 1) -> None:
        if count != 1:
            span.set_attribute("messaging.batch.message_count", count)
        if task_id is not None:
            span.set_attribute("messaging.message.id", task_id)
        if error is not None:
            self._failed(span, error)
        span.end()

    def process(self, queue: str, task_id: str, msg: Message) -> Any:
        parent = self._propagate.extract(msg.headers or {})
        producer = self._trace.get_current_span(parent).get_span_context()
        links = [self._trace.Link(producer)] if producer.is_valid else []
        span = self.tracer.start_span(
            f"process {queue}", context=parent, kind=self._trace.SpanKind.CONSUMER, links=links,
            attributes={
                "messaging.system": SYSTEM, "messaging.operation.type": "process",
                "messaging.operation.name": "process", "messaging.destination.name": queue,
                "messaging.message.id": task_id, "asynqpy.task.type": msg.type,
                "asynqpy.task.retry_count": msg.retried,
            })
        token = self._context.attach(self._trace.set_span_in_context(span))
        return span, token

    def processed(self, handle: Any, error: BaseException | None, outcome: str) -> None:
        span, token = handle
        try:
            self._context.detach(token)
        except Exception:  # noqa: BLE001 - detached from another context: the span still ends
            pass
        span.set_attribute("asynqpy.outcome", outcome)
        if error is not None:
            self._failed(span, error)
        span.end()

    def _failed(self, span: Any, error: BaseException) -> None:
        span.record_exception(error)
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)[:200]))


def instrument(tracer_provider: Any = None) -> OpenTelemetryTracing:
    """Trace every enqueue and every attempt of this process (see the module docstring), with
    ``tracer_provider`` (default: OpenTelemetry's global one). Returns the installed tracing."""
    t = OpenTelemetryTracing(tracer_provider)
    tracing.current = t
    return t


def uninstrument() -> None:
    """Stop tracing (what :func:`instrument` installed is removed)."""
    tracing.current = None
