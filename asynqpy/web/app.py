"""The web console's ASGI application: the REST API under ``/api`` and the pages.

Safety: a request whose ``Host`` is not one of ``allowed_hosts`` (the loopback names by
default) is refused (400): a page of another site whose name was rebound to this address (DNS
rebinding) reaches nothing. Every action is a POST that needs the ``X-CSRF-Token`` header to equal
the ``asynqpy_csrf`` cookie the pages set (double submit; the cookie is ``SameSite=Strict``), unless
it carries the console's bearer token (``auth`` bearer: a browser never sends one by itself), and,
when the browser sends an ``Origin``, the same origin; ``read_only`` refuses every action (403);
``auth`` (basic or bearer) guards every route. Pages render every value escaped (Jinja2
autoescape; the scripts only ever set ``textContent``) under a Content-Security-Policy that allows
no inline script.
"""


import base64
import contextlib
import hmac
import ipaddress
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

from ..core import humanize
from ..core.control import concurrency_action as control_action
from ..core.errors import (
    AsynqpyError,
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
from ..core.events import parse_entries
from ..core.inspection import page_start, parse_state
from ..core.jsontext import jsonable
from ..core.keys import queue_keys, validate_queue
from ..core.process import ProcessError, ProcessNotFoundError
from ..core.task import TaskState
from ..core.tenants import state_text
from ..inspector import AsyncInspector
from ..redisio.connection import REDIS_ERRORS

HERE = Path(__file__).resolve().parent
CSRF_COOKIE = "asynqpy_csrf"
CSRF_HEADER = "x-csrf-token"
ACTIONS = ("run", "archive", "delete", "cancel")
ENTRY_ACTIONS = ("pause", "resume", "run", "remove")
"""What the console does to a periodic task entry (the Inspector's cron_pause, cron_resume,
cron_run_now, cron_remove)."""
CHART_DAYS = 14
"""Days of stored history (the daily processed/failed counters) the charts show."""
SLOWLOG_TOP = 10
SERVER_ACTIONS = ("stop", "quiet", "resume", "scale")
TENANT_ACTIONS = ("pause", "resume", "clear", "weight", "concurrency", "rate")
"""What the console does to one tenant (docs/tenants.md); the last three take ``?value=``."""
REPAIR_WAIT = 5.0
"""Seconds a repair from the console waits for the processor's response (then: 202, still queued)."""
MEMORY_EVERY = 30.0
"""Seconds the queues' memory reading in /api/queues is reused (as the metrics exporter does)."""
MAX_BATCH = 1000
EVENTS_SCAN = 500
"""The queue's latest events a task's page looks through for its own (bounded work)."""
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


PROBES = ("/livez", "/readyz")
"""Health probes for an orchestrator: answered whatever the ``Host`` and without ``auth`` (an
orchestrator's probe sends the pod's address and no credentials); they tell only whether the
console answers and reaches Redis."""


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
    def parse(cls, spec: str) -> "Auth":
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


def _web() -> tuple[Any, Any]:
    try:
        import fastapi
        from fastapi.templating import Jinja2Templates
    except ImportError:
        raise InvalidArgumentError("the web console needs its extra: pip install '.[web]' (from a clone of "
                                   "asynqpy)") from None
    return fastapi, Jinja2Templates


def _status(exc: Exception) -> int:
    if isinstance(exc, (TaskNotFoundError, QueueNotFoundError, ProcessNotFoundError, ServerNotFoundError,
                        EntryNotFoundError)):
        return 404
    if isinstance(exc, (TaskStateError, QueueNotEmptyError, ProcessError, DuplicateTaskError, TaskIdConflictError)):
        return 409
    if isinstance(exc, RedisUnavailableError):
        return 503
    return 400


def create_app(redis: Any = None, *, read_only: bool = False, auth: Auth | None = None, refresh: float = 2.0,
               signing_key: Any = None, allowed_hosts: Sequence[str] | None = None) -> Any:
    """The console as an ASGI application (serve it with uvicorn, as ``asynqpy web`` does).
    ``redis``: a URL or an async redis-py client, as for :class:`~asynqpy.AsyncInspector`;
    ``read_only``: no action at all; ``auth``: required credentials; ``refresh``: seconds between
    the pages' live updates; ``allowed_hosts``: the names (and IP addresses) it answers to, as the
    ``Host`` header gives them (any port; ``*.example.com``: its subdomains; ``["*"]``: any
    name); a request for another is refused with 400 (DNS rebinding). Default: the loopback
    names, ``localhost``, ``127.0.0.1`` and ``[::1]``."""
    hosts = host_patterns(LOOPBACK_HOSTS if allowed_hosts is None else allowed_hosts)
    fastapi, Jinja2Templates = _web()
    from fastapi import Body, FastAPI, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
    from fastapi.staticfiles import StaticFiles

    from ..client import AsyncClient

    inspector = AsyncInspector(redis, signing_key=signing_key)
    client = AsyncClient(inspector.redis, signing_key=signing_key)  # process inputs (shares the connection)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        await client.close()
        await inspector.close()

    app = FastAPI(title="asynqpy", version=_version(), docs_url=None, redoc_url=None, lifespan=lifespan,
                  openapi_url="/api/openapi.json",
                  description="The asynqpy web console's REST API: queues, tasks, servers, scheduler entries.")
    templates = Jinja2Templates(directory=str(HERE / "templates"))  # autoescape on for .html
    templates.env.filters["pretty"] = _pretty
    templates.env.filters["seg"] = path_segment
    templates.env.filters["latency"] = lambda pending, secs: humanize.latency(pending, secs)
    templates.env.filters["ago"] = lambda v: humanize.ago(_when(v)) if v else ""
    templates.env.filters["utc"] = lambda v: humanize.utc(_when(v)) if v else ""
    templates.env.filters["when"] = lambda v: f"{humanize.utc(_when(v))} ({humanize.ago(_when(v))})" if v else ""
    templates.env.filters["ago_tag"] = _ago_tag
    templates.env.filters["when_tag"] = _when_tag
    templates.env.filters["utc_tag"] = _utc_tag
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
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

    app.add_middleware(AllowedHosts, allowed_hosts=hosts)  # (added later: runs before guard)

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Any:
        """Every response, a refusal too, carries the security headers and the CSRF cookie."""
        response = await call_next(request)
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        if CSRF_COOKIE not in request.cookies and not read_only:
            response.set_cookie(CSRF_COOKIE, secrets.token_urlsafe(24), samesite="strict", path="/")
        return response

    @app.exception_handler(AsynqpyError)
    async def asynqpy_error(request: Request, exc: AsynqpyError) -> Any:
        return JSONResponse({"error": str(exc)}, _status(exc))

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(request: Request, exc: Any) -> Any:
        """A parameter of the wrong type or out of range: 400 with what is wrong, as every bad input."""
        return JSONResponse({"error": "; ".join(_problem(e) for e in exc.errors())}, 400)

    memory: dict[str, int | None] = {}
    memory_read = [-MEMORY_EVERY]

    async def queue_infos() -> list[Any]:
        """Every queue's info, with a memory reading at most MEMORY_EVERY seconds old (it costs
        four times the rest: not at every refresh of every open overview)."""
        now = time.monotonic()
        fresh = now - memory_read[0] >= MEMORY_EVERY
        infos = await inspector.all_queue_info(memory=fresh)
        if fresh:
            memory.clear()
            memory.update({q.queue: q.memory_bytes for q in infos})
            memory_read[0] = now
            return infos
        return [replace(q, memory_bytes=memory.get(q.queue)) for q in infos]

    def page(request: Request, name: str, **context: Any) -> Any:
        return templates.TemplateResponse(request, name, {"read_only": read_only, "refresh": refresh, **context})

    # -- the API ---------------------------------------------------------------------------------

    @app.get("/api/queues", tags=["queues"])
    async def queues() -> Any:
        """Every queue: its counts by state, size, latency, memory (``memory_bytes``: read at most
        every 30 s; null until a queue's first reading or where Redis refuses MEMORY), processed
        and failed totals."""
        return jsonable(await queue_infos())

    @app.get("/api/queues/{queue}", tags=["queues"])
    async def queue(queue: str, days: int = Query(7, ge=1, le=90)) -> Any:
        """One queue: its snapshot and its daily history (processed, failed), newest first."""
        return {"info": jsonable(await inspector.queue_info(queue)),
                "history": jsonable(await inspector.history(queue, days))}

    @app.get("/api/queues/{queue}/tasks", tags=["tasks"])
    async def tasks(queue: str, state: str = "pending", page: int = Query(1, ge=1),
                    size: int = Query(30, ge=1, le=500), group: str = "") -> Any:
        """A page of a queue's tasks in one state (O(page) however many there are)."""
        st = parse_state(state)
        info = await inspector.queue_info(queue)
        total = getattr(info, st.value) if not group else next(
            (g.size for g in await inspector.groups(queue) if g.group == group), 0)
        got = await inspector.list_tasks(queue, st, page, size, group)
        return {"state": st.value, "page": page, "size": size, "total": total, "tasks": jsonable(got)}

    @app.get("/api/queues/{queue}/tasks/{task_id:path}", tags=["tasks"])
    async def task(queue: str, task_id: str, events: int = Query(50, ge=0, le=1000)) -> Any:
        """One task in full, with its latest ``events`` lifecycle events (among the queue's
        last 500)."""
        info = await inspector.task_info(queue, task_id)
        recent = await inspector.redis.xrevrange(queue_keys(queue).events, count=EVENTS_SCAN) if events else []
        mine = [e for sid, fields in reversed(recent) for e in parse_entries(queue, sid, fields)
                if e.task_id == task_id or e.task_id.startswith(task_id + "|")]
        return {"task": jsonable(info), "events": jsonable(mine[-events:] if events else [])}

    @app.get("/api/queues/{queue}/groups", tags=["queues"])
    async def groups(queue: str) -> Any:
        """A queue's aggregation groups."""
        return jsonable(await inspector.groups(queue))

    @app.post("/api/queues/{queue}/pause", tags=["queues"])
    async def pause(queue: str) -> Any:
        """Pause a queue (its tasks stay; workers take none until it is resumed)."""
        return {"changed": await inspector.pause(queue)}

    @app.post("/api/queues/{queue}/resume", tags=["queues"])
    async def resume(queue: str) -> Any:
        """Resume a paused queue."""
        return {"changed": await inspector.unpause(queue)}

    @app.post("/api/queues/{queue}/actions", tags=["tasks"])
    async def act(queue: str, action: Annotated[str, Body()], ids: Annotated[list[str], Body()]) -> Any:
        """Run, archive, delete or cancel one task or a batch (at most 1000 ids): one result
        per id, "ok" or the error."""
        if action not in ACTIONS:
            raise InvalidArgumentError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
        if not ids or len(ids) > MAX_BATCH:
            raise InvalidArgumentError(f"give 1 to {MAX_BATCH} task ids")
        out: dict[str, str] = {}
        for id in ids:
            try:
                if action == "cancel":
                    await inspector.cancel(id, queue)
                else:
                    await getattr(inspector, f"{action}_task")(queue, id)
                out[id] = "ok"
            except AsynqpyError as exc:
                out[id] = str(exc)
        return {"results": out}

    @app.post("/api/queues/{queue}/states/{state}/{action}", tags=["tasks"])
    async def act_all(queue: str, state: str, action: str) -> Any:
        """Run, archive or delete every task of a queue in one state."""
        if action not in ("run", "archive", "delete"):
            raise InvalidArgumentError(f"action must be run, archive or delete, got {action!r}")
        return {"count": await getattr(inspector, f"{action}_all")(queue, parse_state(state))}

    @app.post("/api/tasks", tags=["tasks"], status_code=201)
    async def enqueue(spec: Annotated[dict[str, Any], Body()]) -> Any:
        """Enqueue a task: ``{"type": ..., "queue": "default", "payload": <any JSON>, "options":
        {...}}`` (the options of ``Client.enqueue``: task_id, process_in, process_at (Unix seconds
        or ISO 8601), max_retry, timeout, priority, unique, key, headers...). A form may give
        ``payload_json`` and ``options_json`` (JSON text) instead. 400: bad JSON, a bad queue name,
        a bad or unknown option (nothing is written); 409: a live task has that id or unique key."""
        task_type, queue, payload, options = _enqueue_request(spec)
        info = await client.enqueue(task_type, payload, queue=queue, **options)
        return {"task": jsonable(info)}

    @app.post("/api/queues/{queue}/tasks/{task_id:path}/duplicate", tags=["tasks"], status_code=201)
    async def duplicate(queue: str, task_id: str) -> Any:
        """Enqueue a copy of a task (any state) under a new id: its type, payload and options
        (max_retry, timeout, retention, priority, headers, group, key, workers and runs, a
        deadline still ahead); not its parents or uniqueness. Returns the new task. Only a task
        whose message verifies (the trust gate, with the console's signing key) is copied: 400
        (SignatureError) for a forged or tampered one, whose copy would be signed anew."""
        info = await inspector.task_info(queue, task_id, verified=True)
        return {"task": jsonable(await client.enqueue(info.type, info.payload, queue=queue,
                                                      **_duplicate_options(info)))}

    @app.post("/api/queues/{queue}/tasks/{task_id:path}/edit", tags=["tasks"])
    async def edit(queue: str, task_id: str, changes: Annotated[dict[str, Any], Body()]) -> Any:
        """Change a pending, scheduled or retry task (``Inspector.edit_task``): any of
        ``payload`` (or ``payload_json``: JSON text), ``max_retry``, ``priority``, ``process_in``
        (seconds; 0: now), ``process_at`` (Unix seconds or ISO 8601). Returns the task as it now
        is. 400: a bad value (nothing changes); 409: the task is not editable (active, archived...)."""
        return {"task": jsonable(await inspector.edit_task(queue, task_id, **_edit_request(changes)))}

    @app.get("/api/queues/{queue}/search", tags=["tasks"])
    async def search(queue: str, id: str = "", type: str = "", cursor: int = Query(0, ge=0, le=2**63),
                     limit: int = Query(30, ge=1, le=1000)) -> Any:
        """Tasks of any state whose id starts with ``id`` and whose type is ``type`` (either may
        be empty). Bounded work per request (about 10 000 tasks looked at): ``cursor`` is where
        to go on from, 0 when the whole queue was searched."""
        if not id and not type:
            raise InvalidArgumentError("give an id prefix (id=), a task type (type=) or both")
        cursor, found = await inspector.find_tasks(queue, id_prefix=id, task_type=type, cursor=cursor, limit=limit)
        return {"cursor": cursor, "tasks": jsonable(found)}

    @app.get("/api/history", tags=["queues"])
    async def history(days: int = Query(CHART_DAYS, ge=1, le=90)) -> Any:
        """Processed and failed per UTC day, every queue together and by queue, oldest day first
        (the stored daily counters)."""
        return _history(await inspector.all_history(days), days)

    @app.post("/api/queues/{queue}/scheduler/{name:path}/{action}", tags=["scheduler"])
    async def entry_action(queue: str, name: str, action: str) -> Any:
        """Pause, resume, run now (enqueue its task at once, outside its schedule; returns the
        task's id) or remove a periodic task entry. 404: no such entry."""
        if action not in ENTRY_ACTIONS:
            raise InvalidArgumentError(f"action must be one of {', '.join(ENTRY_ACTIONS)}, got {action!r}")
        if action == "run":
            return {"task_id": await inspector.cron_run_now(name, queue)}
        await getattr(inspector, f"cron_{action}")(name, queue)
        return {"done": action}

    @app.get("/livez", include_in_schema=False)
    async def livez() -> Any:
        """The console answers (its event loop runs)."""
        return {"live": True}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Any:
        """The console reaches Redis (one PING): 200, else 503."""
        try:
            await inspector.redis.ping()
        except REDIS_ERRORS:
            return JSONResponse({"ready": False, "redis": False}, 503)
        return {"ready": True, "redis": True}

    @app.get("/api/servers", tags=["servers"])
    async def servers() -> Any:
        """Live servers and the tasks each runs (as of its last heartbeat)."""
        return jsonable(await inspector.servers())

    @app.post("/api/servers/{server_id}/{action}", tags=["servers"])
    async def control(server_id: str, action: str, concurrency: str = "") -> Any:
        """Stop a server gracefully, quiet it (it takes no new task; the running ones finish),
        resume it, or resize it (``scale?concurrency=N``: N handlers at once from now on), by id
        (or by name, if one live server has it); returns its acknowledgement (400: a bad action or
        number; 404: no such live server; 504: no acknowledgement within 10 s)."""
        if action not in SERVER_ACTIONS:
            raise InvalidArgumentError(f"action must be one of {', '.join(SERVER_ACTIONS)}, got {action!r}")
        n = 0
        if action == "scale":
            if not concurrency.strip().isdigit():
                raise InvalidArgumentError(f"concurrency must be an integer from 1 to 100000, got {concurrency!r}")
            n = int(concurrency)
            control_action(n)  # (refused here, before any server is looked for)
        live = await inspector.servers()
        if not any(s.id == server_id for s in live):
            named = [s.id for s in live if s.name == server_id]
            if len(named) > 1:
                raise InvalidArgumentError(f"{len(named)} live servers are named {server_id!r}: give an id")
            server_id = named[0] if named else server_id
        try:
            if action == "scale":
                return {"ack": await inspector.scale_server(server_id, n)}
            return {"ack": await getattr(inspector, f"{action}_server")(server_id)}
        except TimeoutError:
            return JSONResponse({"error": f"server {server_id} did not acknowledge within 10 s"}, 504)

    @app.get("/api/queues/{queue}/processes", tags=["processes"])
    async def processes(queue: str, page: int = Query(1, ge=1), size: int = Query(30, ge=1, le=500),
                        status: str = "") -> Any:
        """A page of a queue's durable processes, the most recently changed first (without
        their history); ``status`` (starting, running, error): only those (reads every record
        of the queue)."""
        total, got = await inspector.processes(queue, page_start(page, size), size, status or None)
        return {"page": page, "size": size, "status": status, "total": total, "processes": jsonable(got)}

    @app.get("/api/queues/{queue}/processes/{process_id:path}", tags=["processes"])
    async def process(queue: str, process_id: str, first: int = Query(0, ge=0),
                      count: int = Query(20, ge=0, le=1000)) -> Any:
        """One process: status, state, timer and ``count`` events of its history from event
        ``first`` (1-based; 0: the latest)."""
        return {"process": jsonable(await inspector.process(queue, process_id, first, count))}

    @app.post("/api/queues/{queue}/processes/{process_id:path}/repair", tags=["processes"])
    async def repair(queue: str, process_id: str, args: Annotated[Any, Body(embed=True)] = None) -> Any:
        """Send a repair input (with ``args``) to a process in error; returns the processor's
        response if it comes within 5 s, else 202 (the repair is queued and still runs). 409: the
        process is not in error."""
        try:
            return {"response": jsonable(await client.repair_process(process_id, args, queue=queue,
                                                                     timeout=REPAIR_WAIT))}
        except TimeoutError:
            return JSONResponse({"queued": True}, 202)

    @app.post("/api/queues/{queue}/processes/{process_id:path}/remove", tags=["processes"])
    async def remove(queue: str, process_id: str) -> Any:
        """Send a remove input: once the inputs queued before it ran, the process (record,
        history, timer) is deleted. 404: no such process."""
        if not await client.remove_process(process_id, queue=queue, timeout=0):
            raise ProcessNotFoundError(f"no process {process_id!r} in queue {queue!r}")
        return {"queued": True}

    @app.get("/api/queues/{queue}/tenants", tags=["tenants"])
    async def tenants(queue: str, after: str = "", count: int = Query(100, ge=1, le=1000)) -> Any:
        """A page of the queue's tenants that have pending tasks, in name order (``after``: the
        last tenant of the page before; ``next``: the one to give for the next page, '' when this
        was the last): pending and active tasks, weight, concurrency, rate, paused, ready, and
        ``state``: what it is doing in a few words (the CLI's: "held: rate", "held: concurrency")."""
        got = await inspector.tenants(queue, after=after, count=count)
        rows = [{**jsonable(t), "state": state_text(t, short=True)} for t in got]
        return {"tenants": rows, "next": got[-1].tenant if len(got) == count else ""}

    @app.post("/api/queues/{queue}/tenants/{tenant:path}/{action}", tags=["tenants"])
    async def tenant_action(queue: str, tenant: str, action: str, value: str = "") -> Any:
        """Pause, resume or clear one tenant, or set its ``weight``, ``concurrency`` or ``rate``
        (``?value=``: 3, 5, "50/s"; 0 = no limit); returns the tenant (400: a bad action or value)."""
        if action not in TENANT_ACTIONS:
            raise InvalidArgumentError(f"action must be one of {', '.join(TENANT_ACTIONS)}, got {action!r}")
        if action in ("pause", "resume"):
            got = await inspector.set_tenant(queue, tenant, paused=action == "pause")
        elif action == "clear":
            got = await inspector.clear_tenant(queue, tenant)
        elif action == "rate":
            got = await inspector.set_tenant(queue, tenant, rate=_number_or_text(value))
        else:
            if not value.strip().isdigit():
                raise InvalidArgumentError(f"{action} must be a whole number, got {value!r}")
            n = int(value)
            got = await (inspector.set_tenant(queue, tenant, weight=n) if action == "weight"
                         else inspector.set_tenant(queue, tenant, concurrency=n))
        return {"tenant": jsonable(got)}

    @app.get("/api/scheduler", tags=["scheduler"])
    async def scheduler() -> Any:
        """Every periodic task entry: schedule, next and last tick, history."""
        return jsonable(await inspector.scheduler_entries())

    @app.get("/api/redis", tags=["redis"])
    async def redis_info() -> Any:
        """The Redis server: version, uptime, memory, clients, and the slowest recent commands
        (``slowlog``: the top 10 of SLOWLOG GET, slowest first; null where Redis refuses it)."""
        return await _redis_summary(inspector.redis)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Any:
        """The queue metrics for Prometheus (needs the metrics extra too)."""
        from ..metrics import families
        from ..worker.metrics import prometheus

        pc = prometheus()
        import prometheus_client.core

        class Snapshot:
            def __init__(self, infos: Any) -> None:
                self.infos = infos

            def collect(self) -> Any:
                return families(prometheus_client.core, self.infos)

        registry = pc.CollectorRegistry()
        registry.register(Snapshot(await inspector.all_queue_info()))
        return Response(pc.generate_latest(registry), media_type=pc.CONTENT_TYPE_LATEST)

    # -- the pages -------------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def overview(request: Request) -> Any:
        infos = await queue_infos()
        return page(request, "overview.html", queues=infos,
                    chart=_day_chart(_history(await inspector.all_history(CHART_DAYS), CHART_DAYS)["days"]))

    @app.get("/queues/{queue}", response_class=HTMLResponse, include_in_schema=False)
    async def queue_page(request: Request, queue: str, state: str = "pending", page_no: int = Query(1, alias="page"),
                         size: int = Query(30, ge=1, le=500)) -> Any:
        st = parse_state(state)
        info = await inspector.queue_info(queue)
        got = await inspector.list_tasks(queue, st, max(1, page_no), size) if st is not TaskState.AGGREGATING else []
        total = getattr(info, st.value)
        n_procs = (await inspector.processes(queue, 0, 1))[0]
        days = [{"date": d.date.isoformat(), "processed": d.processed, "failed": d.failed}
                for d in reversed(await inspector.history(queue, CHART_DAYS))]
        return page(request, "queue.html", info=info, state=st.value, states=[s.value for s in TaskState],
                    chart=_day_chart(days),
                    tasks=jsonable(got), page=max(1, page_no), size=size, total=total,
                    pages=max(1, -(-total // size)), processes=n_procs)

    @app.get("/queues/{queue}/processes", response_class=HTMLResponse, include_in_schema=False)
    async def processes_page(request: Request, queue: str, page_no: int = Query(1, alias="page", ge=1),
                             size: int = Query(30, ge=1, le=500), status: str = "") -> Any:
        data = await processes(queue, page_no, size, status)
        return page(request, "processes.html", queue=queue, procs=data["processes"], page=page_no, size=size,
                    total=data["total"], pages=max(1, -(-data["total"] // size)), status=status,
                    statuses=["", "starting", "running", "error"])

    @app.get("/queues/{queue}/processes/{process_id:path}", response_class=HTMLResponse, include_in_schema=False)
    async def process_page(request: Request, queue: str, process_id: str, first: int = Query(0, ge=0),
                           count: int = Query(20, ge=1, le=1000)) -> Any:
        p = (await process(queue, process_id, first, count))["process"]
        start = p["history"][0]["id"] if p["history"] else p["first_event"]
        return page(request, "process.html", queue=queue, p=p, count=count, first=first,
                    older=max(p["first_event"], start - count) if start > p["first_event"] else 0,
                    newer=start + count if p["history"] and p["history"][-1]["id"] < p["events"] else 0)

    @app.get("/queues/{queue}/tenants", response_class=HTMLResponse, include_in_schema=False)
    async def tenants_page(request: Request, queue: str, after: str = "",
                           count: int = Query(100, ge=1, le=1000)) -> Any:
        data = await tenants(queue, after, count)
        return page(request, "tenants.html", queue=queue, tenants=data["tenants"], after=after, next=data["next"],
                    count=count)

    @app.get("/queues/{queue}/tasks/{task_id:path}", response_class=HTMLResponse, include_in_schema=False)
    async def task_page(request: Request, queue: str, task_id: str) -> Any:
        data = await task(queue, task_id, 50)
        return page(request, "task.html", queue=queue, t=data["task"], events=data["events"],
                    editable=data["task"]["state"] in ("pending", "scheduled", "retry"),
                    payload_json=_pretty(data["task"]["payload"], 2))

    @app.get("/enqueue", response_class=HTMLResponse, include_in_schema=False)
    async def enqueue_page(request: Request, queue: str = "", task_id: str = Query("", alias="from")) -> Any:
        """The enqueue form; ``?queue=Q&from=ID`` fills it with a copy of task ID (duplicate)."""
        form = {"queue": queue or "default", "type": "", "payload": "null", "options": "{}"}
        if queue and task_id:  # (through the trust gate: the form would enqueue a signed copy)
            info = await inspector.task_info(queue, task_id, verified=True)
            form.update(type=info.type, payload=_pretty(jsonable(info.payload), 2),
                        options=_pretty(jsonable(_duplicate_options(info)), 2))
        return page(request, "enqueue.html", form=form, source=task_id,
                    queues=await inspector.queues())

    @app.get("/queues/{queue}/search", response_class=HTMLResponse, include_in_schema=False)
    async def search_page(request: Request, queue: str, id: str = "", type: str = "",
                          cursor: int = Query(0, ge=0, le=2**63)) -> Any:
        data = await search(queue, id, type, cursor, 100)
        return page(request, "search.html", queue=queue, id=id, type=type, start=cursor, **data)

    @app.get("/redis", response_class=HTMLResponse, include_in_schema=False)
    async def redis_page(request: Request) -> Any:
        r = await _redis_summary(inspector.redis)
        up = r.get("uptime_in_seconds")
        return page(request, "redis.html", r={**r, "uptime": humanize.duration(float(up)) if up is not None else ""})

    @app.get("/servers", response_class=HTMLResponse, include_in_schema=False)
    async def servers_page(request: Request) -> Any:
        return page(request, "servers.html", servers=jsonable(await inspector.servers()))

    @app.get("/scheduler", response_class=HTMLResponse, include_in_schema=False)
    async def scheduler_page(request: Request) -> Any:
        return page(request, "scheduler.html", entries=jsonable(await inspector.scheduler_entries()))

    return app


ENQUEUE_FIELDS = ("type", "queue", "payload", "payload_json", "options", "options_json")


def _json_text(name: str, text: Any) -> Any:
    """The value of a form's JSON text field; InvalidArgumentError saying where it is wrong."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{name} must be JSON text, got {type(text).__name__}")
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{name.removesuffix('_json')} is not valid JSON: {exc.msg} (line {exc.lineno}, "
                                   f"column {exc.colno})") from None


def _one_of(spec: dict[str, Any], name: str) -> Any:
    """``spec[name]``, or the value of the JSON text ``spec[name + '_json']`` (not both)."""
    if name in spec and f"{name}_json" in spec:
        raise InvalidArgumentError(f"give {name} or {name}_json, not both")
    return _json_text(f"{name}_json", spec[f"{name}_json"]) if f"{name}_json" in spec else spec.get(name)


def _times(options: dict[str, Any]) -> dict[str, Any]:
    """``process_at`` and ``deadline`` given as ISO 8601 text (as JSON has no datetime) read as
    datetimes; the rest as it is (the client checks every option)."""
    out = dict(options)
    for k in ("process_at", "deadline"):
        if isinstance(out.get(k), str):
            try:
                out[k] = datetime.fromisoformat(out[k])
            except ValueError:
                raise InvalidArgumentError(f"{k} must be Unix seconds or an ISO 8601 time, got {out[k]!r}") from None
    return out


def _enqueue_request(spec: dict[str, Any]) -> tuple[str, str, Any, dict[str, Any]]:
    """(type, queue, payload, options) of an enqueue request, checked as far as the console can
    (the client checks the rest before writing anything)."""
    unknown = sorted(set(spec) - set(ENQUEUE_FIELDS))
    if unknown:
        raise InvalidArgumentError(f"unknown field {', '.join(map(repr, unknown))}: give {', '.join(ENQUEUE_FIELDS)}")
    task_type, queue = spec.get("type"), spec.get("queue", "default")
    if not isinstance(task_type, str) or not task_type.strip():
        raise InvalidArgumentError("type must be a non-empty string (the task type a handler is registered for)")
    if not isinstance(queue, str):
        raise InvalidArgumentError(f"queue must be a string, got {queue!r}")
    validate_queue(queue.strip())
    payload = _one_of(spec, "payload")
    options = _one_of(spec, "options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise InvalidArgumentError(f"options must be a JSON object of enqueue options, got {_pretty(options)[:100]}")
    if "queue" in options:
        raise InvalidArgumentError("give the queue as the queue field, not as an option")
    return task_type.strip(), queue.strip(), payload, _times(options)


def _edit_request(changes: dict[str, Any]) -> dict[str, Any]:
    """The changes of an edit request (``payload_json`` read; times as for an enqueue)."""
    out = {k: v for k, v in changes.items() if k not in ("payload", "payload_json")}
    if "payload" in changes or "payload_json" in changes:
        out["payload"] = _one_of(changes, "payload")
    return _times(out)


def _duplicate_options(info: Any) -> dict[str, Any]:
    """The enqueue options that make a copy of task ``info`` (a TaskInfo): what it was enqueued
    with (its tenant too), but not its id, parents or uniqueness; a deadline only while it is ahead."""
    out: dict[str, Any] = {"max_retry": info.max_retry}
    if info.timeout is not None:
        out["timeout"] = info.timeout or None  # (0: no limit)
    if info.retention:
        out["retention"] = info.retention
    if info.deadline is not None and info.deadline.timestamp() > time.time():
        out["deadline"] = info.deadline.timestamp()
    if info.priority != 5 and info.workers is None:
        out["priority"] = info.priority
    for k in ("headers", "group", "key", "workers", "tenant"):
        if getattr(info, k):
            out[k] = getattr(info, k)
    if info.workers is not None and info.runs_wanted != 1:
        out["runs"] = info.runs_wanted
    return out


def _history(by_queue: dict[str, list[Any]], days: int) -> dict[str, Any]:
    """The daily counters of every queue (DailyStats, newest first) as the API gives them: every
    queue together and by queue, oldest day first."""
    total: dict[str, list[int]] = {}
    queues: dict[str, list[dict[str, Any]]] = {}
    for name, stats in by_queue.items():
        queues[name] = [{"date": d.date.isoformat(), "processed": d.processed, "failed": d.failed}
                        for d in reversed(stats)]
        for d in stats:
            row = total.setdefault(d.date.isoformat(), [0, 0])
            row[0] += d.processed
            row[1] += d.failed
    if not total:  # (no queue yet: the days, at zero)
        today = datetime.now(timezone.utc).date()
        total = {(today - timedelta(days=i)).isoformat(): [0, 0] for i in range(days)}
    return {"days": [{"date": k, "processed": v[0], "failed": v[1]} for k, v in sorted(total.items())],
            "queues": queues}


CHART_W, CHART_H = 1000, 120


def _day_chart(days: list[dict[str, Any]]) -> dict[str, Any]:
    """A bar chart (plain SVG, drawn by the template) of processed and failed per day: for each
    day its two bars' geometry and its label, and the scale's top."""
    top = max([1, *(max(d["processed"], d["failed"]) for d in days)])
    slot = CHART_W / max(1, len(days))
    bar = max(1.0, slot * 0.4)
    bars = []
    for i, d in enumerate(days):
        ok_h = round((CHART_H - 4) * d["processed"] / top, 1)
        bad_h = round((CHART_H - 4) * d["failed"] / top, 1)
        x = round(i * slot + slot * 0.1, 1)
        bars.append({"date": d["date"], "processed": d["processed"], "failed": d["failed"],
                     "ok": {"x": x, "y": round(CHART_H - ok_h, 1), "h": ok_h},
                     "bad": {"x": round(x + bar, 1), "y": round(CHART_H - bad_h, 1), "h": bad_h},
                     "label_x": round(i * slot + slot / 2, 1)})
    return {"bars": bars, "top": top, "bar": round(bar, 1), "w": CHART_W, "h": CHART_H,
            "processed": sum(d["processed"] for d in days), "failed": sum(d["failed"] for d in days)}


REDIS_FIELDS = ("redis_version", "redis_mode", "role", "uptime_in_seconds", "used_memory", "used_memory_human",
                "used_memory_peak_human", "maxmemory", "maxmemory_human", "maxmemory_policy", "mem_fragmentation_ratio",
                "connected_clients", "blocked_clients", "maxclients", "total_commands_processed",
                "instantaneous_ops_per_sec", "keyspace_hits", "keyspace_misses", "evicted_keys", "expired_keys")


async def _redis_summary(redis: Any) -> dict[str, Any]:
    """What the Redis page shows: INFO's main fields (of the first node, on a Cluster) and the
    slowest recent commands (SLOWLOG GET: the top 10, slowest first; arguments cut to 200
    characters; null where Redis refuses SLOWLOG)."""
    from redis.exceptions import ResponseError

    out = await _redis_info(redis)
    try:
        raw = await redis.slowlog_get(128)
    except ResponseError:
        out["slowlog"] = None
        return out
    if isinstance(raw, dict):  # (a Cluster client: node -> its log)
        raw = [e for entries in raw.values() for e in entries]
    entries = sorted((_slowlog_entry(e) for e in raw), key=lambda e: -e["duration_us"])
    out["slowlog"] = jsonable(entries[:SLOWLOG_TOP])
    return out


async def _redis_info(redis: Any) -> dict[str, Any]:
    """INFO's fields of :data:`REDIS_FIELDS` (of the first node, on a Cluster); None for each
    where the server refuses INFO (renamed on a managed Redis: the page shows blanks)."""
    from redis.exceptions import ResponseError

    try:
        info = await redis.info()
    except ResponseError:
        info = {}
    if info and "redis_version" not in info:  # a Cluster client: node -> its INFO
        info = next((v for v in info.values() if isinstance(v, dict)), {})
    return {k: info.get(k) for k in REDIS_FIELDS}


def _slowlog_entry(e: dict[str, Any]) -> dict[str, Any]:
    """One SLOWLOG entry as the page shows it: when, how long, the command cut to 200
    characters, and the client's address."""
    command = e.get("command", b"")
    text = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
    client = e.get("client_address") or ""
    return {"id": e.get("id"), "at": datetime.fromtimestamp(int(e.get("start_time", 0)), timezone.utc),
            "duration_us": int(e.get("duration", 0)),
            "command": text[:200] + ("…" if len(text) > 200 else ""),
            "client": client.decode(errors="replace") if isinstance(client, bytes) else str(client)}


def _problem(error: dict[str, Any]) -> str:
    """One of FastAPI's validation errors as text: 'page: Input should be ...'."""
    where = [str(x) for x in error.get("loc", ()) if x not in ("query", "path", "body")]
    return f"{'.'.join(where) or 'request'}: {error.get('msg', 'invalid')}"


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


def _pretty(value: Any, indent: int | None = None) -> str:
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


def _version() -> str:
    from .. import __version__

    return __version__


def _number_or_text(value: str) -> float | str:
    """A rate as the console sends it: a number of tasks a second, or text such as "50/s"."""
    try:
        return float(value)
    except ValueError:
        return value
