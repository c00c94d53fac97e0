"""The tracing hook point (sans-I/O): ``current`` is None, so the client and the worker trace
nothing and import nothing, until :func:`asynqpy.otel.instrument` installs a :class:`Tracing`
(OpenTelemetry, the ``otel`` extra). The client calls :meth:`Tracing.send` around an enqueue; the
worker calls :meth:`Tracing.process` as a handler starts and :meth:`Tracing.processed` when its
attempt ends; a durable run's replay calls the ``durable_*`` methods (core/durable/traced.py)."""

from __future__ import annotations

from typing import Any, Protocol

from ..model.codec import Message


class Tracing(Protocol):
    """What the client and the worker call when tracing is on."""

    def send(self, queue: str, task_type: str, headers: dict[str, str] | None) -> tuple[Any, dict[str, str]]:
        """Start a producer span; returns it and ``headers`` with the trace context added."""
        ...

    def sent(self, span: Any, task_id: str | None, error: BaseException | None, count: int = 1) -> None:
        """End a producer span: the task's id (None for a batch, or a failed enqueue), ``error``
        (the enqueue failed), ``count`` (the tasks sent: a batch's size)."""
        ...

    def process(self, queue: str, task_id: str, msg: Message) -> Any:
        """Start a consumer span, a child of the context in ``msg.headers``, and make it current
        for the handler; returns a handle for :meth:`processed`."""
        ...

    def processed(self, handle: Any, error: BaseException | None, outcome: str) -> None:
        """End a consumer span: ``error`` (None: the handler succeeded), ``outcome`` (what the
        attempt came to: succeeded, failed, lease_lost, requeued)."""
        ...


    def durable_input(self, queue: str, run_id: str, function: str, op: str,
                      stored: dict[str, str] | None) -> tuple[Any, dict[str, str] | None]:
        """Start the span of one input of a durable run (its replay), a child of the run's trace
        context ``stored`` (kept in the run's state; None: the run's first input, a child of the
        current span), current while the replay runs; returns a handle for :meth:`durable_input_end`
        and, for a first input, the trace context the run keeps (None otherwise)."""
        ...

    def durable_input_end(self, handle: Any, error: BaseException | None, status: str) -> None:
        """End an input's span: ``error`` (the input failed), ``status`` (the run's, after it)."""
        ...

    def durable_op(self, parent: Any, op: str, name: str | None, position: int, attributes: dict[str, Any]) -> Any:
        """Start the span of a run's operation done in this input (a step's or task's attempt, a
        sleep or wait recorded), a child of the input's span (``parent``), current until
        :meth:`durable_op_end`."""
        ...

    def durable_op_end(self, handle: Any, error: BaseException | None) -> None:
        """End an operation's span (``error``: the attempt failed)."""
        ...


current: Tracing | None = None
"""The installed tracing, or None (the default: nothing is traced)."""
