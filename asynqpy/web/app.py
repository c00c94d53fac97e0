"""The web console's ASGI application: the REST API under ``/api`` and the pages.

:func:`create_app` only assembles: the options, the middleware and the error handlers of
:mod:`asynqpy.web.shared` (allowed hosts, auth, CSRF, read-only, security headers; the safety
they give is told there) and one router per resource from :mod:`asynqpy.web.routes`.
"""

from collections.abc import Sequence
from typing import Any

from ..core.model.errors import AsynqpyError, InvalidArgumentError
from ..inspector import AsyncInspector
from .shared import (
    HERE,
    LOOPBACK_HOSTS,
    AllowedHosts,
    Auth,
    Console,
    asynqpy_error,
    bad_parameter,
    guard,
    headers,
    host_patterns,
    templates,
)

__all__ = ["Auth", "create_app", "host_patterns"]


def create_app(redis: Any = None, *, read_only: bool = False, auth: Auth | None = None, refresh: float = 2.0,
               signing_key: Any = None, allowed_hosts: Sequence[str] | None = None, encryption: Any = None) -> Any:
    """The console as an ASGI application (serve it with uvicorn, as ``asynqpy web`` does).
    ``redis``: a URL or an async redis-py client, as for :class:`~asynqpy.AsyncInspector`;
    ``read_only``: no action at all; ``auth``: required credentials; ``refresh``: seconds between
    the pages' live updates; ``allowed_hosts``: the names (and IP addresses) it answers to, as the
    ``Host`` header gives them (any port; ``*.example.com``: its subdomains; ``["*"]``: any
    name); a request for another is refused with 400 (DNS rebinding). Default: the loopback
    names, ``localhost``, ``127.0.0.1`` and ``[::1]``. ``encryption``: a key ring: encrypted
    payloads, results and logs are shown decrypted (else as "encrypted"; docs/encryption.md)."""
    hosts = host_patterns(LOOPBACK_HOSTS if allowed_hosts is None else allowed_hosts)
    _web()
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.staticfiles import StaticFiles

    from ..client import AsyncClient
    from .routes import cron, durable, enqueue, metrics, probes, processes, queues, redis_info, servers, tasks, tenants

    inspector = AsyncInspector(redis, signing_key=signing_key, encryption=encryption)
    # process inputs (shares the connection)
    client = AsyncClient(inspector.redis, signing_key=signing_key, encryption=encryption)
    console = Console(inspector, client, templates(), read_only=read_only, refresh=refresh)
    app = FastAPI(title="asynqpy", version=_version(), docs_url=None, redoc_url=None, lifespan=console.lifespan,
                  openapi_url="/api/openapi.json",
                  description="The asynqpy web console's REST API: queues, tasks, servers, scheduler entries.")
    app.state.console = console
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.middleware("http")(guard(auth, read_only))
    app.add_middleware(AllowedHosts, allowed_hosts=hosts)  # (added later: runs before guard)
    app.middleware("http")(headers(read_only))  # (added last: outermost, on every response)
    app.add_exception_handler(AsynqpyError, asynqpy_error)
    app.add_exception_handler(RequestValidationError, bad_parameter)
    for resource in (queues, tasks, enqueue, cron, probes, servers, processes, durable, tenants, redis_info, metrics):
        app.include_router(resource.router)
    return app


def _web() -> None:
    """InvalidArgumentError saying what to install when the ``web`` extra is missing."""
    try:
        import fastapi.templating  # noqa: F401
    except ImportError:
        raise InvalidArgumentError("the web console needs its extra: pip install '.[web]' (from a clone of "
                                   "asynqpy)") from None


def _version() -> str:
    from .. import __version__

    return __version__
