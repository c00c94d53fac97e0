"""A FastAPI app on asynqpy: enqueue a task, await its result (``call``), and stream its progress
to the browser as server-sent events.

    pip install '.[fastapi,web]'                # (in asynqpy's repository) FastAPI, and uvicorn to serve it
    asynqpy worker examples.fastapi_app:tasks   # a worker for the tasks (another terminal)
    uvicorn examples.fastapi_app:web            # then open http://127.0.0.1:8000/

Redis: $ASYNQPY_REDIS_URL (default redis://localhost:6379/0). tests/test_fastapi.py drives it with
httpx against a worker on a real redis-server.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, StreamingResponse

from asynqpy import App, current_task
from asynqpy.contrib.fastapi import AsynqpyClient, call_events, event_stream, lifespan

tasks = App(os.environ.get("ASYNQPY_REDIS_URL", "redis://localhost:6379/0"), default_queue="reports")


@tasks.task(retention=600)  # results kept 10 minutes: GET /reports/{id} reads them after the task ended
async def build_report(rows: int, pause: float = 0.25) -> dict[str, Any]:
    """A slow task that says how far it got."""
    task = current_task()
    for i in range(rows):
        await asyncio.sleep(pause)
        task.progress({"done": i + 1, "of": rows})
    return {"rows": rows, "total": rows * (rows + 1) // 2}


web = FastAPI(title="reports", lifespan=lifespan(app=tasks))  # the App's AsyncClient, opened and closed with the app


@web.post("/reports")
async def start_report(rows: int = 5) -> dict[str, str]:
    """Enqueue and return at once: the id to ask for the result with."""
    info = await build_report.aenqueue(rows)
    return {"id": info.id}


@web.get("/reports/{task_id}")
async def report_result(task_id: str, client: AsynqpyClient, wait: float = 30.0) -> dict[str, Any]:
    """The result of an enqueued report, waiting for it (at most ``wait`` seconds) without polling."""
    result: dict[str, Any] = await client.result(task_id, queue="reports", timeout=wait)
    return result


@web.get("/run")
async def run_report(rows: int = 3) -> dict[str, Any]:
    """Enqueue and await the result in one call (a worker runs it)."""
    return await asyncio.wait_for(build_report.acall(rows, pause=0.01), 30)


@web.get("/stream")
async def stream_report(rows: int = 5) -> StreamingResponse:
    """Enqueue and stream the task's progress, then its result, as server-sent events."""
    return event_stream(call_events(build_report, rows, timeout=60))


PAGE = """<!doctype html><meta charset=utf-8><title>reports</title>
<button id=go>Build a report</button> <progress id=bar value=0 max=1></progress> <span id=out></span>
<script>
document.getElementById("go").onclick = () => {
  const source = new EventSource("/stream?rows=8");
  source.addEventListener("progress", (e) => {
    const p = JSON.parse(e.data);
    bar.max = p.of; bar.value = p.done; out.textContent = p.done + " / " + p.of;
  });
  source.addEventListener("result", (e) => { out.textContent = "done: " + e.data; source.close(); });
  source.addEventListener("error", (e) => {
    out.textContent = "failed: " + (e.data || "connection lost"); source.close();
  });
};
</script>"""


@web.get("/", response_class=HTMLResponse)
def page() -> str:
    return PAGE
