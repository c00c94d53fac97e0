"""``ctx.task``: a normal task enqueued by a durable run and awaited durably (docs/durable.md).

The enqueue is a step of the run (recorded ``task`` event; at least once, with fixed ids, so a
re-run enqueues nothing new): the task ``<run>:<position>:task`` and, ``after=`` it, a small
*notify* task (type :data:`NOTIFY`, in the run's queue, ``on_parent_failure="run"``) whose
handler sends the run the task's end as an internal signal (``\\x00task:<position>``, its
idempotency key the notify task's id). The run waits for that signal holding no worker, as
``wait_for``; replay returns the task's result, or raises StepFailedError if it did not complete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..model.errors import (
    DuplicateTaskError,
    InvalidArgumentError,
    MalformedMessageError,
    SignatureError,
    TaskIdConflictError,
    TaskNotFoundError,
)

log = logging.getLogger("asynqpy.durable")

NOTIFY = "durable:notify"
"""Task type of the notify tasks (their handler is registered by ``mux.durable(client=...)``)."""
RETENTION_S = 86400
"""A ctx.task's retention when it names none: its result is kept while its notify task runs."""


def signal_name(seq: int, gen: int = 0) -> str:
    """The internal signal of the end of the task at position ``seq`` of generation ``gen`` (a
    run continued as new ``gen`` times)."""
    return f"\x00task:{seq}" if not gen else f"\x00task:{gen}:{seq}"


def tag(run_id: str, gen: int) -> str:
    """What names a run's generation in its step ids and task ids: the run id, then
    ``<run id>~<gen>`` once it continued as new."""
    return run_id if not gen else f"{run_id}~{gen}"


def target(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """(type, payload, options) of ``ctx.task(task, *args, **kwargs)``: a task function of an
    App (its options apply), or a task type with its payload as the one argument and enqueue
    options as keywords."""
    if isinstance(task, str):
        if len(args) > 1:
            raise InvalidArgumentError("ctx.task(type, payload, **options): one payload")
        return task, args[0] if args else None, dict(kwargs)
    make = getattr(task, "s", None)
    if not callable(make):
        raise InvalidArgumentError(f"ctx.task takes a task function (@app.task) or a task type, got {task!r}")
    sig = make(*args, **kwargs)
    return str(sig.type), sig.payload, dict(sig.options)


async def enqueue(client: Any, run_id: str, run_queue: str, seq: int, type: str, payload: Any,
                  options: dict[str, Any], gen: int = 0) -> str:
    """Enqueue the task and its notify task (each once, whatever the attempts): the task's id."""
    tid = f"{tag(run_id, gen)}:{seq}:task"
    options = {"retention": RETENTION_S, **options, "task_id": tid}
    queue = options.get("queue") or "default"
    for task_type, body, opts in ((type, payload, options),
                                  (NOTIFY, {"run": run_id, "queue": run_queue, "i": seq, "g": gen},
                                   {"task_id": f"{tid}:notify", "queue": run_queue, "after": [(queue, tid)],
                                    "on_parent_failure": "run"})):
        try:
            await client.enqueue(task_type, body, **opts)
        except (TaskIdConflictError, DuplicateTaskError):
            pass  # enqueued by an earlier attempt of this step
    return tid


async def start_child(client: Any, fn: Any, args: list[Any], child_id: str, queue: str | None,
                      parent: dict[str, Any]) -> dict[str, str]:
    """Start a child run (once: a second start of its id starts nothing): its id and queue."""
    run = await client.start(fn, *args, id=child_id, queue=queue, _parent=parent)
    return {"id": run.id, "q": run.queue}


def notify_handler(client: Callable[[], Any]) -> Callable[[Any], Any]:
    """The handler of :data:`NOTIFY` tasks: the parent's end, sent to the run as a signal (a task
    that did not complete: with its last error, read from its kept message, which the run's
    StepFailedError then names). With
    signing keys (the client's), a completed task's result is read from its own signed message and
    verified (the copy the workflow record delivers is not signed: docs/internals-tasks.md); one
    that does not verify reaches the run as the task's failure (``refused``: ctx.task raises
    StepFailedError), never as its result."""
    async def notify(task: Any) -> None:
        p = task.payload
        end = task.parents[0] if task.parents else None
        ended: dict[str, Any] = {"s": end.state if end is not None else "deleted",
                                 "v": end.result if end is not None else None}
        c = client()
        if end is not None and end.state != "completed":  # its last error, for the run's StepFailedError
            try:
                error = await c._task_error(end.queue, end.id)
            except (SignatureError, MalformedMessageError) as exc:  # (not verified, or not readable: not shown)
                log.error("durable run %s: the error of task %s (queue %s) is not shown: %s", p["run"], end.id,
                          end.queue, exc)
                error = f"its error is not shown: {exc}"
            if error:
                ended["e"] = error
        if end is not None and end.state == "completed" and getattr(c.broker, "signer", None) is not None:
            try:
                ended["v"] = await c._verified_result(end.queue, end.id)
            except (SignatureError, MalformedMessageError, TaskNotFoundError) as exc:
                log.error("durable run %s: the result of task %s (queue %s) is refused: %s", p["run"], end.id,
                          end.queue, exc)
                ended = {"s": "refused", "v": None, "e": str(exc)}
        name = signal_name(int(p["i"]), int(p.get("g") or 0))
        await c.signal(p["run"], name, ended, queue=p["queue"], idempotency_key=task.id)

    return notify
