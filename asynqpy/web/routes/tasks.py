"""Tasks: a page of a queue's tasks in one state, one task with its events, the search, and the
actions on one task, a batch or every task of a state; the task and search pages. (Enqueue,
duplicate and edit: :mod:`.enqueue`.)"""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import HTMLResponse

from ...core.inspector.inspection import parse_state
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


@router.get("/api/queues/{queue}/search", tags=["tasks"])
async def search(console: ConsoleDep, queue: str, id: str = "", type: str = "",
                 cursor: int = Query(0, ge=0, le=2**63), limit: int = Query(30, ge=1, le=1000)) -> Any:
    """Tasks of any state whose id starts with ``id`` and whose type is ``type`` (either may
    be empty). Bounded work per request (about 10 000 tasks looked at): ``cursor`` is where
    to go on from, 0 when the whole queue was searched."""
    if not id and not type:
        raise InvalidArgumentError("give an id prefix (id=), a task type (type=) or both")
    cursor, found = await console.inspector.find_tasks(queue, id_prefix=id, task_type=type, cursor=cursor,
                                                       limit=limit)
    return {"cursor": cursor, "tasks": jsonable(found)}


@router.get("/queues/{queue}/tasks/{task_id:path}", response_class=HTMLResponse, include_in_schema=False)
async def task_page(console: ConsoleDep, request: Request, queue: str, task_id: str) -> Any:
    data = await task(console, queue, task_id, 50)
    return console.page(request, "task.html", queue=queue, t=data["task"], events=data["events"],
                        editable=data["task"]["state"] in ("pending", "scheduled", "retry"),
                        payload_json=pretty(data["task"]["payload"], 2))


@router.get("/queues/{queue}/search", response_class=HTMLResponse, include_in_schema=False)
async def search_page(console: ConsoleDep, request: Request, queue: str, id: str = "", type: str = "",
                      cursor: int = Query(0, ge=0, le=2**63)) -> Any:
    data = await search(console, queue, id, type, cursor, 100)
    return console.page(request, "search.html", queue=queue, id=id, type=type, start=cursor, **data)
