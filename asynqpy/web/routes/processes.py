"""Durable processes: a page of a queue's processes, one process with its history, a repair or a
remove input; their pages."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from ...core.inspector.inspection import page_start
from ...core.processes.model import ProcessNotFoundError
from ...core.text.jsontext import jsonable
from . import ConsoleDep

router = APIRouter()
REPAIR_WAIT = 5.0
"""Seconds a repair from the console waits for the processor's response (then: 202, still queued)."""


@router.get("/api/queues/{queue}/processes", tags=["processes"])
async def processes(console: ConsoleDep, queue: str, page: int = Query(1, ge=1), size: int = Query(30, ge=1, le=500),
                    status: str = "") -> Any:
    """A page of a queue's durable processes, the most recently changed first (without
    their history); ``status`` (starting, running, error): only those (reads every record
    of the queue)."""
    total, got = await console.inspector.processes(queue, page_start(page, size), size, status or None)
    return {"page": page, "size": size, "status": status, "total": total, "processes": jsonable(got)}


@router.get("/api/queues/{queue}/processes/{process_id:path}", tags=["processes"])
async def process(console: ConsoleDep, queue: str, process_id: str, first: int = Query(0, ge=0),
                  count: int = Query(20, ge=0, le=1000)) -> Any:
    """One process: status, state, timer and ``count`` events of its history from event
    ``first`` (1-based; 0: the latest)."""
    return {"process": jsonable(await console.inspector.process(queue, process_id, first, count))}


@router.post("/api/queues/{queue}/processes/{process_id:path}/repair", tags=["processes"])
async def repair(console: ConsoleDep, queue: str, process_id: str,
                 args: Annotated[Any, Body(embed=True)] = None) -> Any:
    """Send a repair input (with ``args``) to a process in error; returns the processor's
    response if it comes within 5 s, else 202 (the repair is queued and still runs). 409: the
    process is not in error."""
    try:
        return {"response": jsonable(await console.client.repair_process(process_id, args, queue=queue,
                                                                         timeout=REPAIR_WAIT))}
    except TimeoutError:
        return JSONResponse({"queued": True}, 202)


@router.post("/api/queues/{queue}/processes/{process_id:path}/remove", tags=["processes"])
async def remove(console: ConsoleDep, queue: str, process_id: str) -> Any:
    """Send a remove input: once the inputs queued before it ran, the process (record,
    history, timer) is deleted. 404: no such process."""
    if not await console.client.remove_process(process_id, queue=queue, timeout=0):
        raise ProcessNotFoundError(f"no process {process_id!r} in queue {queue!r}")
    return {"queued": True}


@router.get("/queues/{queue}/processes", response_class=HTMLResponse, include_in_schema=False)
async def processes_page(console: ConsoleDep, request: Request, queue: str,
                         page_no: int = Query(1, alias="page", ge=1), size: int = Query(30, ge=1, le=500),
                         status: str = "") -> Any:
    data = await processes(console, queue, page_no, size, status)
    return console.page(request, "processes.html", queue=queue, procs=data["processes"], page=page_no, size=size,
                        total=data["total"], pages=max(1, -(-data["total"] // size)), status=status,
                        statuses=["", "starting", "running", "error"])


@router.get("/queues/{queue}/processes/{process_id:path}", response_class=HTMLResponse, include_in_schema=False)
async def process_page(console: ConsoleDep, request: Request, queue: str, process_id: str,
                       first: int = Query(0, ge=0), count: int = Query(20, ge=1, le=1000)) -> Any:
    p = (await process(console, queue, process_id, first, count))["process"]
    start = p["history"][0]["id"] if p["history"] else p["first_event"]
    return console.page(request, "process.html", queue=queue, p=p, count=count, first=first,
                        older=max(p["first_event"], start - count) if start > p["first_event"] else 0,
                        newer=start + count if p["history"] and p["history"][-1]["id"] < p["events"] else 0)
