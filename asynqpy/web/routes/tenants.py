"""Tenants: a page of a queue's tenants with pending tasks, and what the console does to one
(pause, resume, clear, its weight, concurrency or rate; docs/tenants.md); the tenants page."""

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from ...core.model.errors import InvalidArgumentError
from ...core.tenants.plans import state_text
from ...core.text.jsontext import jsonable
from . import ConsoleDep

router = APIRouter()
TENANT_ACTIONS = ("pause", "resume", "clear", "weight", "concurrency", "rate")
"""What the console does to one tenant (docs/tenants.md); the last three take ``?value=``."""


@router.get("/api/queues/{queue}/tenants", tags=["tenants"])
async def tenants(console: ConsoleDep, queue: str, after: str = "", count: int = Query(100, ge=1, le=1000)) -> Any:
    """A page of the queue's tenants that have pending tasks, in name order (``after``: the
    last tenant of the page before; ``next``: the one to give for the next page, '' when this
    was the last): pending and active tasks, weight, concurrency, rate, paused, ready, and
    ``state``: what it is doing in a few words (the CLI's: "held: rate", "held: concurrency")."""
    got = await console.inspector.tenants(queue, after=after, count=count)
    rows = [{**jsonable(t), "state": state_text(t, short=True)} for t in got]
    return {"tenants": rows, "next": got[-1].tenant if len(got) == count else ""}


@router.post("/api/queues/{queue}/tenants/{tenant:path}/{action}", tags=["tenants"])
async def tenant_action(console: ConsoleDep, queue: str, tenant: str, action: str, value: str = "") -> Any:
    """Pause, resume or clear one tenant, or set its ``weight``, ``concurrency`` or ``rate``
    (``?value=``: 3, 5, "50/s"; 0 = no limit); returns the tenant (400: a bad action or value)."""
    inspector = console.inspector
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


@router.get("/queues/{queue}/tenants", response_class=HTMLResponse, include_in_schema=False)
async def tenants_page(console: ConsoleDep, request: Request, queue: str, after: str = "",
                       count: int = Query(100, ge=1, le=1000)) -> Any:
    data = await tenants(console, queue, after, count)
    return console.page(request, "tenants.html", queue=queue, tenants=data["tenants"], after=after,
                        next=data["next"], count=count)


def _number_or_text(value: str) -> float | str:
    """A rate as the console sends it: a number of tasks a second, or text such as "50/s"."""
    try:
        return float(value)
    except ValueError:
        return value
