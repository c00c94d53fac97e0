"""What the console's routers share: who may ask (the allowed hosts, :class:`Auth`, the CSRF and
read-only guard, the security headers), how an error answers (JSON with its status), and
:class:`Console`, the one object every route reads and acts through (the Inspector, the client,
the templates and their filters, the options), given to each route by the ``ConsoleDep``
dependency of :mod:`asynqpy.web.routes`.

Safety: a request whose ``Host`` is not one of ``allowed_hosts`` (the loopback names by
default) is refused (400): a page of another site whose name was rebound to this address (DNS
rebinding) reaches nothing. Every action is a POST that needs the ``X-CSRF-Token`` header to equal
the ``asynqpy_csrf`` cookie the pages set (double submit; the cookie is ``SameSite=Strict``), unless
it carries the console's bearer token (``auth`` bearer: a browser never sends one by itself), and,
when the browser sends an ``Origin``, the same origin; ``read_only`` refuses every action (403);
``auth`` (basic or bearer) guards every route. Pages render every value escaped (Jinja2
autoescape; the scripts only ever set ``textContent``) under a Content-Security-Policy that allows
no inline script.

Importable without the ``web`` extra (FastAPI, Starlette and Jinja2 are imported where used):
the CLI reads ``--auth`` and ``--allowed-host`` before :func:`~asynqpy.web.create_app` says
what to install.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import ipaddress
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.model.errors import (
    DuplicateTaskError,
    EntryNotFoundError,
    InvalidArgumentError,
    QueueNotEmptyError,
    QueueNotFoundError,
    RedisUnavailableError,
    ServerNotFoundError,
    TaskIdConflictError,
    TaskNotFoundError,
    TaskStateError,
)
from ..core.processes.model import ProcessError, ProcessNotFoundError
from ..core.text import humanize

if TYPE_CHECKING:
    from ..client import AsyncClient
    from ..inspector import AsyncInspector

HERE = Path(__file__).resolve().parent
CSRF_COOKIE = "asynqpy_csrf"
CSRF_HEADER = "x-csrf-token"
MEMORY_EVERY = 30.0
"""Seconds the queues' memory reading in /api/queues is reused (as the metrics exporter does)."""
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""The names ``create_app`` answers to by default (those of a console bound to loopback)."""
HOST_KEY = "asynqpy.host_allowed"
_HOST_NAME = re.compile(r"^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?$")
PROBES = ("/livez", "/readyz")
"""Health probes for an orchestrator: answered whatever the ``Host`` and without ``auth`` (an
orchestrator's probe sends the pod's address and no credentials); they tell only whether the
console answers and reaches Redis."""

Middleware = Callable[[Any, Any], Awaitable[Any]]
"""A function middleware, as ``app.middleware("http")`` takes it: (request, call_next) -> response."""


# -- who may ask ---------------------------------------------------------------------------------

def host_patterns(names: Sequence[str]) -> list[str]:
    """The ``allowed_hosts`` of :func:`create_app` as Starlette's TrustedHostMiddleware matches
    them: lower case, IPv6 addresses in brackets; InvalidArgumentError for anything but a host
    name, an IP address, ``*.domain`` (its subdomains) or ``*`` (any Host), without port or scheme."""
    if isinstance(names, str) or not isinstance(names, Sequence) or not names:
        raise InvalidArgumentError(f"allowed_hosts must be a non-empty list of host names (or ['*']), got {names!r}")
    out: list[str] = []
    for raw in names:
        name = raw.strip().lower() if isinstance(raw, str) else ""
        try:
            ip = ipaddress.ip_address(name[1:-1] if name.startswith("[") and name.endswith("]") else name)
            name = f"[{ip}]" if ip.version == 6 else str(ip)
        except ValueError:
            if name != "*" and not _HOST_NAME.match(name):
                raise InvalidArgumentError(f"allowed host {raw!r} is not a host name, an IP address, '*.domain' "
                                           "or '*' (give it without port or scheme)") from None
        if name not in out:
            out.append(name)
    return out


class AllowedHosts:
    """ASGI middleware: Starlette's TrustedHostMiddleware (which parses the ``Host`` header and
    matches it, any port), with a refusal that says what to do. The refusal is JSON, as every
    error of the console."""

    def __init__(self, app: Any, allowed_hosts: list[str]) -> None:
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        self.app = app
        self.allowed = allowed_hosts
        self.check = TrustedHostMiddleware(self._through, allowed_hosts=allowed_hosts, www_redirect=False)

    async def _through(self, scope: Any, receive: Any, send: Any) -> None:
        scope[HOST_KEY] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or (scope["type"] == "http" and scope["path"] in PROBES):
            await self.app(scope, receive, send)  # (the probes tell nothing: any Host, as an orchestrator sends)
            return

        async def passed_only(message: Any) -> None:  # (TrustedHostMiddleware's own refusal is replaced)
            if scope.get(HOST_KEY):
                await send(message)

        await self.check(scope, receive, passed_only)
        if not scope.get(HOST_KEY):
            from starlette.datastructures import Headers
            from starlette.responses import JSONResponse

            host = Headers(scope=scope).get("host", "")
            await JSONResponse({"error": f"Host {host!r} is not a name of this console (DNS rebinding protection); "
                                         f"it answers to {', '.join(self.allowed)}: add a name with asynqpy web "
                                         "--allowed-host NAME or create_app(allowed_hosts=[...])"},
                               400)(scope, receive, send)


@dataclass(frozen=True)
class Auth:
    """Who may use the console: HTTP basic (``user`` and ``password``) or a bearer ``token``."""

    user: str = ""
    password: str = ""
    token: str = ""

    @classmethod
    def parse(cls, spec: str) -> Auth:
        """``basic:USER:PASSWORD`` or ``bearer:TOKEN``; InvalidArgumentError otherwise."""
        kind, _, rest = spec.strip().partition(":")
        if kind == "basic":
            user, sep, password = rest.partition(":")
            if user and sep and password:
                return cls(user=user, password=password)
        elif kind == "bearer" and rest:
            return cls(token=rest)
        raise InvalidArgumentError("auth must be 'basic:USER:PASSWORD' or 'bearer:TOKEN' (non-empty parts)")

    def allows(self, header: str | None) -> bool:
        """Does this Authorization header carry the credentials?"""
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        if self.token:
            return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode())
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except ValueError:
            return False
        return hmac.compare_digest(given, f"{self.user}:{self.password}".encode())

    @property
    def challenge(self) -> str:
        return 'Bearer realm="asynqpy"' if self.token else 'Basic realm="asynqpy", charset="UTF-8"'


def guard(auth: Auth | None, read_only: bool) -> Middleware:
    """The middleware every request goes through (after the ``Host`` check): the credentials
    (not for the probes), then, for anything but a read, read-only, the CSRF token and the
    ``Origin``."""
    from fastapi.responses import JSONResponse, PlainTextResponse

    async def guard(request: Any, call_next: Any) -> Any:
        probe = request.url.path in PROBES
        if auth is not None and not probe and not auth.allows(request.headers.get("authorization")):
            return PlainTextResponse("authentication required", 401, headers={"www-authenticate": auth.challenge})
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            if read_only:
                return JSONResponse({"error": "this console is read-only"}, 403)
            cookie = request.cookies.get(CSRF_COOKIE, "")
            header = request.headers.get(CSRF_HEADER, "")
            origin = request.headers.get("origin")
            # a bearer token (checked above) is never sent by a browser on its own, unlike a cookie
            # or basic credentials it remembers: a request carrying it is not a forgery
            bearer = auth is not None and bool(auth.token)
            if not bearer and (not cookie or not hmac.compare_digest(cookie.encode(), header.encode())):
                return JSONResponse({"error": "missing or wrong CSRF token: send the X-CSRF-Token header equal "
                                             "to the asynqpy_csrf cookie (docs/web.md, scripted clients)"}, 403)
            if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host", ""):
                return JSONResponse({"error": "cross-origin request refused"}, 403)
        return await call_next(request)

    return guard


def headers(read_only: bool) -> Middleware:
    """The outermost middleware: every response, a refusal too, carries the security headers and
    the CSRF cookie."""

    async def headers(request: Any, call_next: Any) -> Any:
        """Every response, a refusal too, carries the security headers and the CSRF cookie."""
        response = await call_next(request)
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        if CSRF_COOKIE not in request.cookies and not read_only:
            response.set_cookie(CSRF_COOKIE, secrets.token_urlsafe(24), samesite="strict", path="/")
        return response

    return headers


# -- errors ----------------------------------------------------------------------------------------

def error_status(exc: Exception) -> int:
    """The HTTP status of an asynqpy error: 404 not found, 409 conflict, 503 Redis down, else 400."""
    if isinstance(exc, (TaskNotFoundError, QueueNotFoundError, ProcessNotFoundError, ServerNotFoundError,
                        EntryNotFoundError)):
        return 404
    if isinstance(exc, (TaskStateError, QueueNotEmptyError, ProcessError, DuplicateTaskError, TaskIdConflictError)):
        return 409
    if isinstance(exc, RedisUnavailableError):
        return 503
    return 400


async def asynqpy_error(request: Any, exc: Exception) -> Any:
    """An asynqpy error (AsynqpyError) raised by a route: JSON ``{"error": ...}`` with :func:`error_status`."""
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": str(exc)}, error_status(exc))


async def bad_parameter(request: Any, exc: Any) -> Any:
    """A parameter of the wrong type or out of range: 400 with what is wrong, as every bad input."""
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": "; ".join(_problem(e) for e in exc.errors())}, 400)


def _problem(error: dict[str, Any]) -> str:
    """One of FastAPI's validation errors as text: 'page: Input should be ...'."""
    where = [str(x) for x in error.get("loc", ()) if x not in ("query", "path", "body")]
    return f"{'.'.join(where) or 'request'}: {error.get('msg', 'invalid')}"


# -- the console -----------------------------------------------------------------------------------

@dataclass
class Console:
    """What every route reads and acts through, one per application (``app.state.console``):
    the Inspector, a client sharing its connection (enqueues, a process's inputs), the templates
    and the options of :func:`create_app`."""

    inspector: AsyncInspector
    client: AsyncClient
    templates: Any
    read_only: bool = False
    refresh: float = 2.0
    memory: dict[str, int | None] = field(default_factory=dict)
    memory_read: float = -MEMORY_EVERY

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """The application's lifespan: the connections close when it stops."""
        yield
        await self.client.close()
        await self.inspector.close()

    async def queue_infos(self) -> list[Any]:
        """Every queue's info, with a memory reading at most MEMORY_EVERY seconds old (it costs
        four times the rest: not at every refresh of every open overview)."""
        now = time.monotonic()
        fresh = now - self.memory_read >= MEMORY_EVERY
        infos = await self.inspector.all_queue_info(memory=fresh)
        if fresh:
            self.memory.clear()
            self.memory.update({q.queue: q.memory_bytes for q in infos})
            self.memory_read = now
            return infos
        return [replace(q, memory_bytes=self.memory.get(q.queue)) for q in infos]

    def page(self, request: Any, name: str, **context: Any) -> Any:
        """The page ``name`` (a template) rendered with ``context`` and the console's options."""
        return self.templates.TemplateResponse(request, name,
                                               {"read_only": self.read_only, "refresh": self.refresh, **context})


def templates() -> Any:
    """The pages' Jinja2 templates (autoescape on for .html) with the console's filters."""
    from fastapi.templating import Jinja2Templates

    out = Jinja2Templates(directory=str(HERE / "templates"))
    out.env.filters["pretty"] = pretty
    out.env.filters["seg"] = path_segment
    out.env.filters["latency"] = lambda pending, secs: humanize.latency(pending, secs)
    out.env.filters["ago"] = lambda v: humanize.ago(_when(v)) if v else ""
    out.env.filters["utc"] = lambda v: humanize.utc(_when(v)) if v else ""
    out.env.filters["when"] = lambda v: f"{humanize.utc(_when(v))} ({humanize.ago(_when(v))})" if v else ""
    out.env.filters["ago_tag"] = _ago_tag
    out.env.filters["when_tag"] = _when_tag
    out.env.filters["utc_tag"] = _utc_tag
    return out


# -- values for pages and JSON ---------------------------------------------------------------------

def pretty(value: Any, indent: int | None = None) -> str:
    """A value as JSON text for a page (its characters as they are: the template escapes them)."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)


def path_segment(value: Any) -> str:
    """A name as one segment of a URL's path, every reserved character encoded (``/`` too, which
    Jinja's ``urlencode`` leaves): ``../../billing`` stays one segment, never a way up the path that
    the browser resolves before sending (a tenant's "pause" turned into another queue's). A segment
    that is exactly ``.`` or ``..`` cannot be encoded so (browsers resolve ``%2e`` too): names made
    by asynqpy refuse them (tenants, scheduler entries); the pages' scripts encode the same way
    (``encodeURIComponent``)."""
    from urllib.parse import quote

    return quote(str(value), safe="", errors="surrogateescape")


def _when(value: Any) -> datetime:
    """A time as the templates get it (a datetime, or its ISO 8601 text from jsonable)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _raw(value: Any) -> str:
    """A time's raw value, as the API gives it (ISO 8601, UTC, to the microsecond)."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _ago_tag(value: Any) -> Any:
    """A list's time for people: how long ago or in how long, with the exact UTC time and the raw
    value on hover (the title) and in ``datetime``. Escaped (Markup of escaped parts)."""
    from markupsafe import Markup, escape

    if not value:
        return ""
    at = _when(value)
    return Markup('<time datetime="{}" title="{} · {}">{}</time>').format(
        escape(_raw(value)), humanize.utc(at), escape(_raw(value)), humanize.ago(at))


def _when_tag(value: Any) -> Any:
    """A detail page's time for people (the UTC time and how far it is), the raw value on hover."""
    from markupsafe import Markup, escape

    if not value:
        return ""
    at = _when(value)
    return Markup('<time datetime="{}" title="{}">{} ({})</time>').format(
        escape(_raw(value)), escape(_raw(value)), humanize.utc(at), humanize.ago(at))


def _utc_tag(value: Any) -> Any:
    """An event's time (the UTC time), the raw value on hover."""
    from markupsafe import Markup, escape

    if not value:
        return ""
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        escape(_raw(value)), escape(_raw(value)), humanize.utc(_when(value)))
