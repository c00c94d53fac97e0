"""The tracing hook point (sans-I/O): ``current`` is None, so the client and the worker trace
nothing and import nothing, until :func:`asynqpy.otel.instrument` installs a :class:`Tracing`
(OpenTelemetry, the ``otel`` extra). The client calls :meth:`Tracing.send` around an enqueue; the
worker calls :meth:`Tracing.process` as a handler starts and :meth:`Tracing.processed` when its
attempt ends."""

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


current: Tracing | None = None
"""The installed tracing, or None (the default: nothing is traced)."""
