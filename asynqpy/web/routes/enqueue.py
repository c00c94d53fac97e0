"""Writing tasks: enqueue one (the API and the form's page, which can start from a copy of a
task), duplicate one, edit one that waits; the requests read and checked as far as the console
can (the client checks the rest before writing anything)."""

import json
import time
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import HTMLResponse

from ...core.model.errors import InvalidArgumentError
from ...core.spine.keys import validate_queue
from ...core.text.jsontext import jsonable
from ..shared import pretty
from . import ConsoleDep

router = APIRouter()
ENQUEUE_FIELDS = ("type", "queue", "payload", "payload_json", "options", "options_json")


@router.post("/api/tasks", tags=["tasks"], status_code=201)
async def enqueue(console: ConsoleDep, spec: Annotated[dict[str, Any], Body()]) -> Any:
    """Enqueue a task: ``{"type": ..., "queue": "default", "payload": <any JSON>, "options":
    {...}}`` (the options of ``Client.enqueue``: task_id, process_in, process_at (Unix seconds
    or ISO 8601), max_retry, timeout, priority, unique, key, headers...). A form may give
    ``payload_json`` and ``options_json`` (JSON text) instead. 400: bad JSON, a bad queue name,
    a bad or unknown option (nothing is written); 409: a live task has that id or unique key."""
    task_type, queue, payload, options = _enqueue_request(spec)
    info = await console.client.enqueue(task_type, payload, queue=queue, **options)
    return {"task": jsonable(info)}


@router.post("/api/queues/{queue}/tasks/{task_id:path}/duplicate", tags=["tasks"], status_code=201)
async def duplicate(console: ConsoleDep, queue: str, task_id: str) -> Any:
    """Enqueue a copy of a task (any state) under a new id: its type, payload and options
    (max_retry, timeout, retention, priority, headers, group, key, workers and runs, a
    deadline still ahead); not its parents or uniqueness. Returns the new task. Only a task
    whose message verifies (the trust gate, with the console's signing key) is copied: 400
    (SignatureError) for a forged or tampered one, whose copy would be signed anew."""
    info = await console.inspector.task_info(queue, task_id, verified=True)
    return {"task": jsonable(await console.client.enqueue(info.type, info.payload, queue=queue,
                                                          **_duplicate_options(info)))}


@router.post("/api/queues/{queue}/tasks/{task_id:path}/edit", tags=["tasks"])
async def edit(console: ConsoleDep, queue: str, task_id: str, changes: Annotated[dict[str, Any], Body()]) -> Any:
    """Change a pending, scheduled or retry task (``Inspector.edit_task``): any of
    ``payload`` (or ``payload_json``: JSON text), ``max_retry``, ``priority``, ``process_in``
    (seconds; 0: now), ``process_at`` (Unix seconds or ISO 8601). Returns the task as it now
    is. 400: a bad value (nothing changes); 409: the task is not editable (active, archived...)."""
    return {"task": jsonable(await console.inspector.edit_task(queue, task_id, **_edit_request(changes)))}


@router.get("/enqueue", response_class=HTMLResponse, include_in_schema=False)
async def enqueue_page(console: ConsoleDep, request: Request, queue: str = "",
                       task_id: str = Query("", alias="from")) -> Any:
    """The enqueue form; ``?queue=Q&from=ID`` fills it with a copy of task ID (duplicate)."""
    form = {"queue": queue or "default", "type": "", "payload": "null", "options": "{}"}
    if queue and task_id:  # (through the trust gate: the form would enqueue a signed copy)
        info = await console.inspector.task_info(queue, task_id, verified=True)
        form.update(type=info.type, payload=pretty(jsonable(info.payload), 2),
                    options=pretty(jsonable(_duplicate_options(info)), 2))
    return console.page(request, "enqueue.html", form=form, source=task_id,
                        queues=await console.inspector.queues())


def _json_text(name: str, text: Any) -> Any:
    """The value of a form's JSON text field; InvalidArgumentError saying where it is wrong."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{name} must be JSON text, got {type(text).__name__}")
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{name.removesuffix('_json')} is not valid JSON: {exc.msg} (line {exc.lineno}, "
                                   f"column {exc.colno})") from None


def _one_of(spec: dict[str, Any], name: str) -> Any:
    """``spec[name]``, or the value of the JSON text ``spec[name + '_json']`` (not both)."""
    if name in spec and f"{name}_json" in spec:
        raise InvalidArgumentError(f"give {name} or {name}_json, not both")
    return _json_text(f"{name}_json", spec[f"{name}_json"]) if f"{name}_json" in spec else spec.get(name)


def _times(options: dict[str, Any]) -> dict[str, Any]:
    """``process_at`` and ``deadline`` given as ISO 8601 text (as JSON has no datetime) read as
    datetimes; the rest as it is (the client checks every option)."""
    out = dict(options)
    for k in ("process_at", "deadline"):
        if isinstance(out.get(k), str):
            try:
                out[k] = datetime.fromisoformat(out[k])
            except ValueError:
                raise InvalidArgumentError(f"{k} must be Unix seconds or an ISO 8601 time, got {out[k]!r}") from None
    return out


def _enqueue_request(spec: dict[str, Any]) -> tuple[str, str, Any, dict[str, Any]]:
    """(type, queue, payload, options) of an enqueue request, checked as far as the console can
    (the client checks the rest before writing anything)."""
    unknown = sorted(set(spec) - set(ENQUEUE_FIELDS))
    if unknown:
        raise InvalidArgumentError(f"unknown field {', '.join(map(repr, unknown))}: give {', '.join(ENQUEUE_FIELDS)}")
    task_type, queue = spec.get("type"), spec.get("queue", "default")
    if not isinstance(task_type, str) or not task_type.strip():
        raise InvalidArgumentError("type must be a non-empty string (the task type a handler is registered for)")
    if not isinstance(queue, str):
        raise InvalidArgumentError(f"queue must be a string, got {queue!r}")
    validate_queue(queue.strip())
    payload = _one_of(spec, "payload")
    options = _one_of(spec, "options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise InvalidArgumentError(f"options must be a JSON object of enqueue options, got {pretty(options)[:100]}")
    if "queue" in options:
        raise InvalidArgumentError("give the queue as the queue field, not as an option")
    return task_type.strip(), queue.strip(), payload, _times(options)


def _edit_request(changes: dict[str, Any]) -> dict[str, Any]:
    """The changes of an edit request (``payload_json`` read; times as for an enqueue)."""
    out = {k: v for k, v in changes.items() if k not in ("payload", "payload_json")}
    if "payload" in changes or "payload_json" in changes:
        out["payload"] = _one_of(changes, "payload")
    return _times(out)


def _duplicate_options(info: Any) -> dict[str, Any]:
    """The enqueue options that make a copy of task ``info`` (a TaskInfo): what it was enqueued
    with (its tenant too), but not its id, parents or uniqueness; a deadline only while it is ahead."""
    out: dict[str, Any] = {"max_retry": info.max_retry}
    if info.timeout is not None:
        out["timeout"] = info.timeout or None  # (0: no limit)
    if info.retention:
        out["retention"] = info.retention
    if info.deadline is not None and info.deadline.timestamp() > time.time():
        out["deadline"] = info.deadline.timestamp()
    if info.priority != 5 and info.workers is None:
        out["priority"] = info.priority
    for k in ("headers", "group", "key", "workers", "tenant"):
        if getattr(info, k):
            out[k] = getattr(info, k)
    if info.workers is not None and info.runs_wanted != 1:
        out["runs"] = info.runs_wanted
    return out
