"""Queues: every queue's snapshot, one queue, its groups, pause and resume, the daily history;
the overview page (``/``) and a queue's page, with their day charts."""

from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from ...core.inspector.inspection import parse_state
from ...core.model.task import TaskState
from ...core.spine.queue_settings import console_rows
from ...core.text.jsontext import jsonable
from . import ConsoleDep

router = APIRouter()
CHART_DAYS = 14
"""Days of stored history (the daily processed/failed counters) the charts show."""
CHART_W, CHART_H = 1000, 120


@router.get("/api/queues", tags=["queues"])
async def queues(console: ConsoleDep) -> Any:
    """Every queue: its counts by state, size, latency, memory (``memory_bytes``: read at most
    every 30 s; null until a queue's first reading or where Redis refuses MEMORY), processed
    and failed totals."""
    return jsonable(await console.queue_infos())


@router.get("/api/queues/{queue}", tags=["queues"])
async def queue(console: ConsoleDep, queue: str, days: int = Query(7, ge=1, le=90)) -> Any:
    """One queue: its snapshot and its daily history (processed, failed), newest first."""
    return {"info": jsonable(await console.inspector.queue_info(queue)),
            "history": jsonable(await console.inspector.history(queue, days))}


@router.get("/api/queues/{queue}/groups", tags=["queues"])
async def groups(console: ConsoleDep, queue: str) -> Any:
    """A queue's aggregation groups."""
    return jsonable(await console.inspector.groups(queue))


@router.post("/api/queues/{queue}/pause", tags=["queues"])
async def pause(console: ConsoleDep, queue: str) -> Any:
    """Pause a queue (its tasks stay; workers take none until it is resumed)."""
    return {"changed": await console.inspector.pause(queue)}


@router.post("/api/queues/{queue}/resume", tags=["queues"])
async def resume(console: ConsoleDep, queue: str) -> Any:
    """Resume a paused queue."""
    return {"changed": await console.inspector.unpause(queue)}


@router.get("/api/history", tags=["queues"])
async def history(console: ConsoleDep, days: int = Query(CHART_DAYS, ge=1, le=90)) -> Any:
    """Processed and failed per UTC day, every queue together and by queue, oldest day first
    (the stored daily counters)."""
    return _history(await console.inspector.all_history(days), days)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def overview(console: ConsoleDep, request: Request) -> Any:
    infos = await console.queue_infos()
    return console.page(request, "overview.html", queues=infos,
                        chart=_day_chart(_history(await console.inspector.all_history(CHART_DAYS), CHART_DAYS)["days"]))


@router.get("/queues/{queue}", response_class=HTMLResponse, include_in_schema=False)
async def queue_page(console: ConsoleDep, request: Request, queue: str, state: str = "pending",
                     page_no: int = Query(1, alias="page"), size: int = Query(30, ge=1, le=500)) -> Any:
    inspector = console.inspector
    st = parse_state(state)
    info = await inspector.queue_info(queue)
    got = await inspector.list_tasks(queue, st, max(1, page_no), size) if st is not TaskState.AGGREGATING else []
    total = getattr(info, st.value)
    n_procs = (await inspector.processes(queue, 0, 1))[0]
    days = [{"date": d.date.isoformat(), "processed": d.processed, "failed": d.failed}
            for d in reversed(await inspector.history(queue, CHART_DAYS))]
    return console.page(request, "queue.html", info=info, state=st.value, states=[s.value for s in TaskState],
                        chart=_day_chart(days),
                        tasks=jsonable(got), page=max(1, page_no), size=size, total=total,
                        pages=max(1, -(-total // size)), processes=n_procs, settings=console_rows(info))


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
