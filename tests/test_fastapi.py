"""asynqpy.contrib.fastapi and examples/fastapi_app.py: the lifespan opens and closes the client,
routes get it as a dependency; the example enqueues, awaits results and streams progress (SSE),
driven with httpx against a worker on a real redis-server."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from asynqpy import AsyncClient
from asynqpy.contrib.fastapi import AsynqpyClient, call_events, lifespan, open_client

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fastapi_app.py"


def test_the_lifespan_opens_the_client_the_routes_get_and_closes_it() -> None:
    web = FastAPI(lifespan=lifespan("memory://fastapi-lifespan"))
    seen: list[AsyncClient] = []

    @web.post("/hello")
    async def hello(client: AsynqpyClient) -> dict[str, str]:
        seen.append(client)
        return {"id": (await client.enqueue("hello", {"n": 1})).id}

    async def main() -> None:
        async with web.router.lifespan_context(web) as state:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=web), base_url="http://t") as http:
                r1 = await http.post("/hello")
                r2 = await http.post("/hello")
            assert r1.status_code == r2.status_code == 200 and r1.json()["id"] != r2.json()["id"]
            assert seen[0] is seen[1] is state["asynqpy_client"] is web.state.asynqpy_client  # one client
        assert web.state.asynqpy_client is None
        with pytest.raises(RuntimeError, match="no asynqpy client"):  # outside the lifespan: said, not a None
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=web), base_url="http://t") as http:
                await http.post("/hello")
        with pytest.raises(Exception, match="client=client"):
            [e async for e in call_events("hello")]  # a task type needs its client

    asyncio.run(main())


def test_open_client_in_a_lifespan_of_ones_own_with_an_apps_client() -> None:
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    from asynqpy import App

    tasks = App("memory://fastapi-own-lifespan")
    opened: list[str] = []

    @asynccontextmanager
    async def own(web: FastAPI) -> AsyncIterator[None]:
        opened.append("db")
        async with open_client(web, app=tasks):
            yield
        opened.append("closed")

    web = FastAPI(lifespan=own)

    @web.get("/same")
    async def same(client: AsynqpyClient) -> bool:
        return client is tasks.aclient()  # the App's own client: its task functions share it

    async def main() -> None:
        async with web.router.lifespan_context(web):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=web), base_url="http://t") as http:
                assert (await http.get("/same")).json() is True
        assert tasks._aclient is None and opened == ["db", "closed"]  # closed with the app

    asyncio.run(main())


@pytest.mark.real
def test_the_example_enqueues_awaits_and_streams_progress(redis_url: str) -> None:
    spec = importlib.util.spec_from_file_location("fastapi_app_example", EXAMPLE)
    assert spec and spec.loader
    example: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.tasks.redis = redis_url

    async def main() -> None:
        server = example.tasks.server(shutdown_timeout=1.0)
        worker = asyncio.create_task(server.arun(example.tasks.mux))  # a real worker, in this event loop
        web = example.web
        try:
            async with web.router.lifespan_context(web), \
                    httpx.AsyncClient(transport=httpx.ASGITransport(app=web), base_url="http://t", timeout=30) as http:
                assert "EventSource" in (await http.get("/")).text
                task_id = (await http.post("/reports", params={"rows": 2})).json()["id"]
                assert (await http.get("/run", params={"rows": 3})).json() == {"rows": 3, "total": 6}
                assert (await http.get(f"/reports/{task_id}", params={"wait": 20})).json() == {"rows": 2, "total": 3}
                streamed = await http.get("/stream", params={"rows": 3})
            assert streamed.headers["content-type"].startswith("text/event-stream")
            frames = [f for f in streamed.text.split("\n\n") if f]
            assert frames[-1] == 'event: result\ndata: {"rows": 3, "total": 6}'
            progress = [f for f in frames if f.startswith("event: progress\n")]
            assert progress and progress[0] == 'event: progress\ndata: {"done": 1, "of": 3}'  # (a report made just
            # before the task returned may be overtaken by its end: docs/results.md "Progress")
        finally:
            server.stop()
            await asyncio.wait_for(worker, 10)

    asyncio.run(main())


def test_call_events_by_name_brings_the_apps_declared_options() -> None:
    """Issue 42 (one rule for every producer): ``call_events("type", payload, client=, app=)``
    checks the payload as the App's task function's arguments and sends its declared options."""
    from asynqpy import App, Inspector, InvalidArgumentError

    url = "memory://fastapi-declared"
    tasks = App(url)

    @tasks.task(name="report:build", queue="reports", max_retry=4)
    def build(rows: int) -> int:
        return rows

    async def main() -> list[tuple[str, Any]]:
        async with AsyncClient(url) as client:
            with pytest.raises(InvalidArgumentError, match="rows"):
                [e async for e in call_events("report:build", {"rows": "many"}, client=client, app=tasks)]
            return [e async for e in call_events("report:build", {"rows": 3}, client=client, app=tasks, timeout=0.2)]

    events = asyncio.run(main())
    assert events and events[-1][0] == "error"  # no worker here: the wait ends, the task stays
    with Inspector(url) as insp:
        [task] = insp.list_tasks("reports", "pending")
    assert (task.payload, task.max_retry) == ({"rows": 3}, 4)
