"""Servers: the live servers and what each runs, and their control (stop, quiet, resume, scale);
the servers page."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from ...core.model.errors import InvalidArgumentError
from ...core.server.control import concurrency_action as control_action
from ...core.text.jsontext import jsonable
from . import ConsoleDep

router = APIRouter()
SERVER_ACTIONS = ("stop", "quiet", "resume", "scale")


@router.get("/api/servers", tags=["servers"])
async def servers(console: ConsoleDep) -> Any:
    """Live servers and the tasks each runs (as of its last heartbeat)."""
    return jsonable(await console.inspector.servers())


@router.post("/api/servers/{server_id}/{action}", tags=["servers"])
async def control(console: ConsoleDep, server_id: str, action: str, concurrency: str = "") -> Any:
    """Stop a server gracefully, quiet it (it takes no new task; the running ones finish),
    resume it, or resize it (``scale?concurrency=N``: N handlers at once from now on), by id
    (or by name, if one live server has it); returns its acknowledgement (400: a bad action or
    number; 404: no such live server; 504: no acknowledgement within 10 s)."""
    inspector = console.inspector
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


@router.get("/servers", response_class=HTMLResponse, include_in_schema=False)
async def servers_page(console: ConsoleDep, request: Request) -> Any:
    from ... import __version__

    return console.page(request, "servers.html", servers=jsonable(await console.inspector.servers()),
                        console_version=__version__)
