"""asynqpy in a FastAPI or Starlette app (``pip install '.[fastapi]'``; docs/integrations-frameworks.md).

    from asynqpy.contrib.fastapi import AsynqpyClient, lifespan

    web = FastAPI(lifespan=lifespan("redis://localhost:6379/0"))   # or lifespan(app=tasks): an App's

    @web.post("/reports")
    async def start(client: AsynqpyClient) -> dict[str, str]:
        info = await client.enqueue("report:build", {"rows": 100}, queue="reports")
        return {"id": info.id}

- :func:`lifespan`: opens one :class:`~asynqpy.AsyncClient` when the app starts (in the server's
  event loop, where the routes run) and closes it when the app stops; :func:`open_client` does the
  same inside a lifespan of your own.
- :func:`get_client` (and ``AsynqpyClient``, its ``Annotated`` form): the route's dependency.
- :func:`call_events` and :func:`event_stream`: enqueue a task, wait for its result (``call``) and
  stream its progress reports to the browser as server-sent events (``EventSource``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends
from starlette.requests import Request
from starlette.responses import StreamingResponse

from ..app import App, TaskFunction, task_call
from ..client import AsyncClient
from ..core.model.errors import InvalidArgumentError

__all__ = ["AsynqpyClient", "call_events", "event_stream", "get_client", "lifespan", "open_client"]

STATE_KEY = "asynqpy_client"
"""Where the client is kept: the lifespan's state (``request.state.asynqpy_client``) and
``app.state.asynqpy_client``."""


@asynccontextmanager
async def open_client(web: Any, redis: Any = None, *, app: App | None = None,
                      **client_options: Any) -> AsyncIterator[AsyncClient]:
    """An :class:`~asynqpy.AsyncClient` for the web app ``web`` while the block runs (kept in
    ``web.state``, where :func:`get_client` finds it), closed after. ``redis`` and
    ``client_options``: as for AsyncClient; or ``app``: an :class:`~asynqpy.App`, whose own
    AsyncClient it is (so its task functions' ``aenqueue``/``acall`` share it), closed with it."""
    if app is not None:
        if redis is not None or client_options:
            raise InvalidArgumentError("give app= or a Redis and client options, not both")
        client = app.aclient()
    else:
        client = AsyncClient(redis, **client_options)
    web.state.asynqpy_client = client
    try:
        yield client
    finally:
        web.state.asynqpy_client = None
        if app is not None:
            await app.aclose()
        else:
            await client.close()


def lifespan(redis: Any = None, *, app: App | None = None,
             **client_options: Any) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A lifespan for ``FastAPI(lifespan=...)`` or ``Starlette(lifespan=...)``: the client of
    :func:`open_client` opened at startup, closed at shutdown, given to the routes through the
    lifespan state (``{"asynqpy_client": client}``) and ``app.state``."""
    @asynccontextmanager
    async def run(web: Any) -> AsyncIterator[dict[str, Any]]:
        async with open_client(web, redis, app=app, **client_options) as client:
            yield {STATE_KEY: client}

    return run


def get_client(request: Request) -> AsyncClient:
    """The route's AsyncClient (``Depends(get_client)``): the one :func:`lifespan` or
    :func:`open_client` opened. RuntimeError if none is open (no such lifespan, or it ended)."""
    client = getattr(request.state, STATE_KEY, None) or getattr(request.app.state, STATE_KEY, None)
    if client is None:
        raise RuntimeError("no asynqpy client: give the app lifespan=asynqpy.contrib.fastapi.lifespan(...), or "
                           "open one with open_client(app) in your own lifespan")
    assert isinstance(client, AsyncClient)
    return client


AsynqpyClient = Annotated[AsyncClient, Depends(get_client)]
"""A route parameter annotated with it gets the app's AsyncClient."""


async def call_events(task: TaskFunction[Any, Any] | str, *args: Any, client: AsyncClient | None = None,
                      timeout: float | None = None, app: App | None = None,
                      **kwargs: Any) -> AsyncIterator[tuple[str, Any]]:
    """Enqueue a task and follow it: ``("progress", value)`` for each progress report of its
    handler (``task.progress(value)``), then ``("result", value)``, or ``("error", "Type:
    message")`` if it failed for good or ``timeout`` passed. ``task``: a task function (with its
    arguments; ``client`` default its App's) or a task type (``payload`` then the options of
    :meth:`~asynqpy.AsyncClient.call`; ``client`` needed; ``app``: the App whose task function
    of that name brings its declared options and argument checks, :func:`asynqpy.app.task_call`).
    Leaving the loop early (the browser went away) stops the wait; the task itself still runs."""
    if isinstance(task, TaskFunction):
        sender = client or task.app.aclient()
    elif isinstance(task, str) and client is not None:
        sender = client
    else:
        raise InvalidArgumentError("call_events(task_function, *args) or call_events(task_type, payload, "
                                   "client=client, **options)")
    task_type, payload, options = task_call(task, args, kwargs, app, "call_events")
    updates: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    call = asyncio.ensure_future(sender.call(task_type, payload, timeout=timeout,
                                             on_progress=lambda v: updates.put_nowait(("progress", v)), **options))
    call.add_done_callback(lambda _: updates.put_nowait(("done", None)))
    try:
        while True:
            kind, value = await updates.get()
            if kind == "done":
                break
            yield kind, value
        try:
            result = call.result()
        except Exception as exc:  # noqa: BLE001 - the browser is told
            yield "error", f"{type(exc).__name__}: {exc}"
        else:
            yield "result", result
    finally:
        call.cancel()  # (a wait still going: stopped; a finished one: its error marked as seen)
        if call.done() and not call.cancelled():
            call.exception()


def event_stream(events: AsyncIterable[tuple[str, Any]]) -> StreamingResponse:
    """A ``text/event-stream`` response of ``(event, value)`` pairs (each value as JSON), for the
    browser's ``EventSource``: ``event_stream(call_events(build_report, 100))``."""
    async def frames() -> AsyncIterator[str]:
        async for kind, value in events:
            yield f"event: {kind}\ndata: {json.dumps(value, default=str)}\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
