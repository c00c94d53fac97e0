"""Periodic tasks (the scheduler's entries): every entry, and what the console does to one
(pause, resume, run now, remove); the periodic tasks page (``/scheduler``)."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ...core.model.errors import InvalidArgumentError
from ...core.text.jsontext import jsonable
from . import ConsoleDep

router = APIRouter()
ENTRY_ACTIONS = ("pause", "resume", "run", "remove")
"""What the console does to a periodic task entry (the Inspector's cron_pause, cron_resume,
cron_run_now, cron_remove)."""


@router.get("/api/scheduler", tags=["scheduler"])
async def scheduler(console: ConsoleDep) -> Any:
    """Every periodic task entry: schedule, next and last tick, history."""
    return jsonable(await console.inspector.scheduler_entries())


@router.post("/api/queues/{queue}/scheduler/{name:path}/{action}", tags=["scheduler"])
async def entry_action(console: ConsoleDep, queue: str, name: str, action: str) -> Any:
    """Pause, resume, run now (enqueue its task at once, outside its schedule; returns the
    task's id) or remove a periodic task entry. 404: no such entry."""
    if action not in ENTRY_ACTIONS:
        raise InvalidArgumentError(f"action must be one of {', '.join(ENTRY_ACTIONS)}, got {action!r}")
    if action == "run":
        return {"task_id": await console.inspector.cron_run_now(name, queue)}
    await getattr(console.inspector, f"cron_{action}")(name, queue)
    return {"done": action}


@router.get("/scheduler", response_class=HTMLResponse, include_in_schema=False)
async def scheduler_page(console: ConsoleDep, request: Request) -> Any:
    return console.page(request, "scheduler.html", entries=jsonable(await console.inspector.scheduler_entries()))
