"""Serving the console with uvicorn, bounded whoever connects (issue 42 #14): ``asynqpy web`` runs
:func:`config`'s server. uvicorn alone holds a connection that sends part of a request (or nothing)
for as long as the client likes: its keep-alive timeout runs only between requests. Here each
connection has :data:`REQUEST_TIMEOUT` seconds to send a request's headers (and again after each
response), and at most :data:`MAX_CONNECTIONS` are open at once: one more closes the oldest that
is not in the middle of a request. The console's ``/livez`` and ``/readyz`` keep answering."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_TIMEOUT = 10.0
"""Seconds a connection has to send a request's headers (from when it opens or its last response)."""
MAX_CONNECTIONS = 256
"""Connections the console keeps open at once; one more closes the oldest idle one."""


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's headers and a cap on connections."""

    _deadline: asyncio.TimerHandle | None = None
    _opened = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._opened = time.monotonic()
        self._arm()
        if len(self.connections) > MAX_CONNECTIONS:
            idle = [c for c in self.connections if c is not self and isinstance(c, BoundedH11Protocol) and c._idle()]
            if idle:
                min(idle, key=lambda c: c._opened).transport.close()

    def _idle(self) -> bool:
        """No request under way: waiting for one (or for the rest of its headers)."""
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(REQUEST_TIMEOUT, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        if self._idle() and not self.transport.is_closing():
            self.transport.close()  # (a request under way is the application's: its response re-arms)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)


def config(app: Any, host: str, port: int, **options: Any) -> Any:
    """The ``uvicorn.Config`` that serves ``app`` bounded so (``options``: more of uvicorn's)."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=BoundedH11Protocol, **options)
