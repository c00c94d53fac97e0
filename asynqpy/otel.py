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
error with ``error.type``. A durable run is one trace: a span ``durable <function>`` per input
(its replay), a child of the run's first one (its context kept in the run's state), and a span
``durable.<op> <name>`` per step or task attempt, sleep or wait done in it (docs/tracing.md).
:func:`uninstrument` turns it off. Without the extra installed and
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

    # -- durable runs (core/durable/traced.py): one trace per run, a span per input and operation --

    def durable_input(self, queue: str, run_id: str, function: str, op: str,
                      stored: dict[str, str] | None) -> tuple[Any, dict[str, str] | None]:
        trace = self._trace
        current = trace.get_current_span().get_span_context()
        attributes = {"messaging.system": SYSTEM, "messaging.destination.name": queue,
                      "asynqpy.durable.run_id": run_id, "asynqpy.durable.function": function,
                      "asynqpy.durable.input": op}
        span = self.tracer.start_span(
            f"durable {function}", context=self._propagate.extract(stored) if stored else None,
            links=[trace.Link(current)] if stored and current.is_valid else [], attributes=attributes)
        ctx = trace.set_span_in_context(span)
        carrier: dict[str, str] = {}
        if not stored:
            self._propagate.inject(carrier, context=ctx)
        return (span, self._context.attach(ctx), attributes), carrier or None

    def durable_input_end(self, handle: Any, error: BaseException | None, status: str) -> None:
        span, token, _ = handle
        self._detach(token)
        if status:
            span.set_attribute("asynqpy.durable.status", status)
        if error is not None:
            self._failed(span, error)
        span.end()

    def durable_op(self, parent: Any, op: str, name: str | None, position: int, attributes: dict[str, Any]) -> Any:
        span, _, run = parent
        attrs = {"asynqpy.durable.run_id": run["asynqpy.durable.run_id"],
                 "asynqpy.durable.function": run["asynqpy.durable.function"],
                 "asynqpy.durable.op": op, "asynqpy.durable.position": position,
                 **({"asynqpy.durable.name": name} if name is not None else {}),
                 **{f"asynqpy.durable.{k}": v for k, v in attributes.items()}}
        child = self.tracer.start_span(f"durable.{op} {name}" if name is not None else f"durable.{op}",
                                       context=self._trace.set_span_in_context(span), attributes=attrs)
        return child, self._context.attach(self._trace.set_span_in_context(child))

    def durable_op_end(self, handle: Any, error: BaseException | None) -> None:
        span, token = handle
        self._detach(token)
        span.set_attribute("asynqpy.outcome", "succeeded" if error is None else "failed")
        if error is not None:
            self._failed(span, error)
        span.end()

    def _detach(self, token: Any) -> None:
        try:
            self._context.detach(token)
        except Exception:  # noqa: BLE001 - detached from another context: the span still ends
            pass

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
