"""Tasks: a page of a queue's tasks in one state, one task with its events, the search, and the
actions on one task, a batch or every task of a state; the task and search pages. (Enqueue,
duplicate and edit: :mod:`.enqueue`.)"""

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.responses import HTMLResponse

from ...core.inspector.inspection import parse_state
from ...core.inspector.search import BUDGET, MAX_BUDGET, parse_payload_condition
from ...core.model.errors import AsynqpyError, InvalidArgumentError
from ...core.results.events import parse_entries
from ...core.spine.keys import queue_keys
from ...core.text.jsontext import jsonable
from ..shared import pretty
from . import ConsoleDep

router = APIRouter()
ACTIONS = ("run", "archive", "delete", "cancel")
MAX_BATCH = 1000
EVENTS_SCAN = 500
"""The queue's latest events a task's page looks through for its own (bounded work)."""


@router.get("/api/queues/{queue}/tasks", tags=["tasks"])
async def tasks(console: ConsoleDep, queue: str, state: str = "pending", page: int = Query(1, ge=1),
                size: int = Query(30, ge=1, le=500), group: str = "") -> Any:
    """A page of a queue's tasks in one state (O(page) however many there are)."""
    inspector = console.inspector
    st = parse_state(state)
    info = await inspector.queue_info(queue)
    total = getattr(info, st.value) if not group else next(
        (g.size for g in await inspector.groups(queue) if g.group == group), 0)
    got = await inspector.list_tasks(queue, st, page, size, group)
    return {"state": st.value, "page": page, "size": size, "total": total, "tasks": jsonable(got)}


@router.get("/api/queues/{queue}/tasks/{task_id:path}", tags=["tasks"])
async def task(console: ConsoleDep, queue: str, task_id: str, events: int = Query(50, ge=0, le=1000)) -> Any:
    """One task in full, with its latest ``events`` lifecycle events (among the queue's
    last 500)."""
    inspector = console.inspector
    info = await inspector.task_info(queue, task_id)
    recent = await inspector.redis.xrevrange(queue_keys(queue).events, count=EVENTS_SCAN) if events else []
    mine = [e for sid, fields in reversed(recent) for e in parse_entries(queue, sid, fields)
            if e.task_id == task_id or e.task_id.startswith(task_id + "|")]
    return {"task": jsonable(info), "events": jsonable(mine[-events:] if events else [])}


@router.post("/api/queues/{queue}/actions", tags=["tasks"])
async def act(console: ConsoleDep, queue: str, action: Annotated[str, Body()],
              ids: Annotated[list[str], Body()]) -> Any:
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
                await console.inspector.cancel(id, queue)
            else:
                await getattr(console.inspector, f"{action}_task")(queue, id)
            out[id] = "ok"
        except AsynqpyError as exc:
            out[id] = str(exc)
    return {"results": out}


@router.post("/api/queues/{queue}/states/{state}/{action}", tags=["tasks"])
async def act_all(console: ConsoleDep, queue: str, state: str, action: str) -> Any:
    """Run, archive or delete every task of a queue in one state."""
    if action not in ("run", "archive", "delete"):
        raise InvalidArgumentError(f"action must be run, archive or delete, got {action!r}")
    return {"count": await getattr(console.inspector, f"{action}_all")(queue, parse_state(state))}


def _conditions(id: str, type: str, state: str, tenant: str, payload: list[str], text: str,
                error: str) -> dict[str, Any]:
    """A search's conditions from the query (payload: ``path=value`` each, as the CLI's -p)."""
    conds = {"id_prefix": id, "type": type, "state": state or None, "tenant": tenant,
             "payload": dict(parse_payload_condition(p) for p in payload if p.strip()) or None,
             "text": text, "error": error}
    if not any(v for v in conds.values()):
        raise InvalidArgumentError("give at least one condition: an id prefix (id=), a type, a state, a tenant, "
                                   "a payload path=value, a text or an error")
    return conds


def _query_conditions(id: str = "", type: str = "", state: str = "", tenant: str = "",
                      payload: Annotated[list[str] | None, Query()] = None, text: str = "",
                      error: str = "") -> dict[str, Any]:
    return _conditions(id, type, state, tenant, payload or [], text, error)


Conditions = Annotated[dict[str, Any], Depends(_query_conditions)]


@router.get("/api/queues/{queue}/search", tags=["tasks"])
async def search(console: ConsoleDep, queue: str, conds: Conditions, cursor: int = Query(0, ge=0, le=2**63),
                 limit: int = Query(30, ge=1, le=1000), budget: int = Query(BUDGET, ge=1, le=MAX_BUDGET)) -> Any:
    """The tasks matching every condition given (docs/search.md): ``id`` (a prefix), ``type``,
    ``state``, ``tenant``, ``payload`` (``path=value``, repeatable), ``text``, ``error``.
    Bounded work per request (a few bounded steps of lua/search.lua): ``cursor`` is where to go
    on from, 0 when the whole queue was searched; ``looked`` of ``total`` is the progress. One
    step of about ``budget`` tasks looked at per request."""
    page = await console.inspector.search_page(queue, cursor=cursor, limit=limit, budget=budget, pages=1, **conds)
    return {"cursor": page.cursor, "looked": page.looked, "total": page.total, "tasks": jsonable(page.tasks)}


@router.get("/api/queues/{queue}/search/count", tags=["tasks"])
async def search_count(console: ConsoleDep, queue: str, conds: Conditions) -> Any:
    """How many tasks match (the whole queue, in bounded steps)."""
    return {"matches": await console.inspector.search_count(queue, **conds)}


@router.post("/api/queues/{queue}/search/{action}", tags=["tasks"])
async def search_act(console: ConsoleDep, queue: str, action: str, conds: Conditions) -> Any:
    """Apply ``action`` (retry, run, archive, delete, cancel) to every matching task, each through
    its one-task action; the report counts what was done, skipped (by state), gone and refused."""
    rep = await console.inspector.search_act(queue, action, **conds)
    return {"action": rep.action, "done": rep.done, "skipped": rep.skipped, "gone": rep.gone, "refused": rep.refused}


@router.get("/queues/{queue}/tasks/{task_id:path}", response_class=HTMLResponse, include_in_schema=False)
async def task_page(console: ConsoleDep, request: Request, queue: str, task_id: str) -> Any:
    data = await task(console, queue, task_id, 50)
    return console.page(request, "task.html", queue=queue, t=data["task"], events=data["events"],
                        editable=data["task"]["state"] in ("pending", "scheduled", "retry"),
                        payload_json=pretty(data["task"]["payload"], 2))


@router.get("/queues/{queue}/search", response_class=HTMLResponse, include_in_schema=False)
async def search_page(console: ConsoleDep, request: Request, queue: str, id: str = "", type: str = "", state: str = "",
                      tenant: str = "", payload: str = "", text: str = "", error: str = "",
                      cursor: int = Query(0, ge=0, le=2**63)) -> Any:
    conds = _conditions(id, type, state, tenant, [payload], text, error)
    data = await search(console, queue, conds, cursor, 100, BUDGET)
    query = urlencode({k: v for k, v in (("id", id), ("type", type), ("state", state), ("tenant", tenant),
                                         ("payload", payload), ("text", text), ("error", error)) if v})
    return console.page(request, "search.html", queue=queue, id=id, type=type, state=state, tenant=tenant,
                        payload=payload, text=text, error=error, query=query, start=cursor, **data)
