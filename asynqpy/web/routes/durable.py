"""Durable runs (docs/durable.md "Operating runs"): a page of a queue's runs by state and function,
one run with its timeline; resume, cancel and signal a run."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from ...core.durable.timeline import RESUMABLE, STATES
from ...core.inspector.inspection import page_start
from ...core.processes.model import ProcessError
from ...core.text.jsontext import jsonable
from . import ConsoleDep

router = APIRouter()
ACTION_WAIT = 5.0
"""Seconds a resume, cancel or signal from the console waits for the run to take it (then: 202, queued)."""


@router.get("/api/queues/{queue}/durable", tags=["durable"])
async def runs(console: ConsoleDep, queue: str, page: int = Query(1, ge=1), size: int = Query(30, ge=1, le=500),
               state: str = "", function: str = "") -> Any:
    """A page of a queue's durable runs, the most recently changed first (without their
    timeline); ``state``: only runs in it; ``function``: only its runs (reads every process
    record of the queue)."""
    total, got = await console.inspector.durable_runs(queue, state=state or None, function=function or None,
                                                      start=page_start(page, size), count=size)
    return {"page": page, "size": size, "state": state, "function": function, "total": total, "runs": jsonable(got)}


@router.get("/api/queues/{queue}/durable/{run_id:path}", tags=["durable"])
async def run(console: ConsoleDep, queue: str, run_id: str) -> Any:
    """One run and its timeline: steps (start, end, attempts, result or error), sleeps, waits,
    signals (and the position that took each), tasks."""
    return {"run": jsonable(await console.inspector.durable_run(queue, run_id))}


async def _act(what: str, done: str, call: Any) -> Any:
    try:
        if not await call:
            raise ProcessError(f"the run is finished or not in a state to {what}")
    except TimeoutError:
        return JSONResponse({"queued": True}, 202)
    return {"response": done}


@router.post("/api/queues/{queue}/durable/{run_id:path}/resume", tags=["durable"])
async def resume(console: ConsoleDep, queue: str, run_id: str) -> Any:
    """Resume a run that failed or stopped in error on the code deployed now. 409: it is in
    neither state; 202: queued, not taken within 5 s."""
    return await _act("resume", "resumed", console.client.resume(run_id, queue=queue, timeout=ACTION_WAIT))


@router.post("/api/queues/{queue}/durable/{run_id:path}/cancel", tags=["durable"])
async def cancel(console: ConsoleDep, queue: str, run_id: str) -> Any:
    """Cancel a run (a running step cooperatively). 409: it had finished."""
    return await _act("cancel", "cancelled", console.client.cancel(
        run_id, queue=queue, reason="cancelled from the console", timeout=ACTION_WAIT))


@router.post("/api/queues/{queue}/durable/{run_id:path}/signal", tags=["durable"])
async def signal(console: ConsoleDep, queue: str, run_id: str, name: Annotated[str, Body(embed=True)],
                 payload: Annotated[Any, Body(embed=True)] = None) -> Any:
    """Send signal ``name`` with ``payload`` to a run. 409: it had finished."""
    return await _act("signal", "delivered", console.client.signal(run_id, name, payload, queue=queue,
                                                                   timeout=ACTION_WAIT))


@router.get("/queues/{queue}/durable", response_class=HTMLResponse, include_in_schema=False)
async def runs_page(console: ConsoleDep, request: Request, queue: str, page_no: int = Query(1, alias="page", ge=1),
                    size: int = Query(30, ge=1, le=500), state: str = "", function: str = "") -> Any:
    data = await runs(console, queue, page_no, size, state, function)
    return console.page(request, "durable_runs.html", queue=queue, runs=data["runs"], page=page_no, size=size,
                        total=data["total"], pages=max(1, -(-data["total"] // size)), state=state,
                        function=function, states=["", *STATES])


@router.get("/queues/{queue}/durable/{run_id:path}", response_class=HTMLResponse, include_in_schema=False)
async def run_page(console: ConsoleDep, request: Request, queue: str, run_id: str) -> Any:
    r = (await run(console, queue, run_id))["run"]
    return console.page(request, "durable_run.html", queue=queue, r=r, resumable=r["state"] in RESUMABLE,
                        finished=r["state"] in ("completed", "failed", "cancelled"))
