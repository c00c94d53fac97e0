"""The trust gate, across every state and every path that writes a stored message again (issue 30
item 3): a message that does not verify is planted in each state a task can be in, every operator
action a keyed Inspector has is driven on it, and then a keyed worker serves the queue (its
dequeue, the propagator cancelling the children of a failed parent, the recoverer, the shutdown
requeue). Afterwards no planted task has run and none is stored with a valid signature: whatever
re-stored it either refused (nothing written) or stored it unsigned.

The same matrix run with signed messages is the control: there the actions take effect and the
results verify, so the check above can fail."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from helpers import serving, until

from asynqpy import Client, Inspector, ServeMux, Task, TaskState
from asynqpy.core.model.errors import AsynqpyError, SignatureError
from asynqpy.core.security.signing import Signer, open_message
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.spine.stored import message_of
from asynqpy.redisio.executor import SyncExecutor
from asynqpy.web import create_app

KEY = b"k" * 32
K = queue_keys("default")

STATES = ("pending", "scheduled", "retry", "archived", "waiting", "blocked", "grouped", "active", "targeted",
          "tenant", "tenant_active")
"""Every state an operator can find a task in (completed tasks keep no message anyone rewrites), and
a tenant's task pending (in the tenant zset) and active (counted in its tenant's slots)."""
_FIRST = ("active", "retry", "tenant_active")
"""Planted first, each dequeued by hand while nothing else is pending."""


def _edit(insp: Inspector, id: str) -> None:
    insp.edit_task("default", id, payload="changed", max_retry=7)


def _cancel(insp: Inspector, id: str) -> None:
    insp.cancel(id, "default")


def _run(insp: Inspector, id: str) -> None:
    insp.run_task("default", id)


def _archive(insp: Inspector, id: str) -> None:
    insp.archive_task("default", id)


def _set_workers(insp: Inspector, id: str) -> None:
    insp.set_workers("default", id, ["w2"])


def _duplicate(insp: Inspector, id: str) -> None:
    """The web console's duplicate (the API; the prefilled enqueue form reads the task the same
    way), on a console holding the key: it enqueues a copy that it signs."""
    assert _console is not None
    form = _console.get("/enqueue", params={"queue": "default", "from": id})
    r = _console.post(f"/api/queues/default/tasks/{id}/duplicate",
                      headers={"X-CSRF-Token": _console.cookies.get("asynqpy_csrf") or ""})
    if r.status_code != 201:
        assert form.status_code == r.status_code, (form.status_code, r.text)  # the form refuses as the API
        error = r.json()["error"]
        raise SignatureError(error) if "bad signature" in error else AsynqpyError(error)
    assert form.status_code == 200
    _copies.append(r.json()["task"]["id"])


_console: Any = None
"""The console (FastAPI's TestClient) that :func:`_duplicate` drives, during :func:`_drive`."""
_copies: list[str] = []
"""The ids of the copies the console enqueued (the signed control)."""

ACTIONS: dict[str, Callable[[Inspector, str], None]] = {
    "edit": _edit, "cancel": _cancel, "run": _run, "archive": _archive, "set_workers": _set_workers,
    "duplicate": _duplicate, "none": lambda i, t: None,
}
"""Every Inspector action that writes a task's message again (delete removes it: nothing to sign),
and the console's duplicate, which signs a copy of it."""


def _plant(backend: Any, producer: Client, insp: Inspector, state: str, id: str) -> None:
    """Put a task of ``producer`` (keyless: unsigned; keyed: signed) in ``state``. Active and retry
    tasks are planted first, while nothing else is pending (each is dequeued by hand)."""
    if state in _FIRST:
        producer.enqueue("t", id, task_id=id, **({"tenant": "acme"} if state == "tenant_active" else {}))
        ex = SyncExecutor(backend.sync)
        taken = ex.run(producer.broker.dequeue("default", 1, 1, "deadbeef"))  # a 1 ms lease: expired at once
        ((tid, data),) = taken.tasks
        assert tid == id
        msg = open_message(producer.broker.signer, "default", id, message_of(data) if data[:1] == b"a" else data)
        if state == "retry":  # a failed attempt, written as the producer's broker signs (or not)
            ex.run(producer.broker.retry("default", id, "deadbeef", msg.with_(retried=1, last_error="boom"),
                                         3_600_000))
    elif state == "pending":
        producer.enqueue("t", id, task_id=id)
    elif state == "scheduled":
        producer.enqueue("t", id, task_id=id, process_in=3600)
    elif state == "archived":
        producer.enqueue("t", id, task_id=id, process_in=3600)
        insp.archive_task("default", id)
    elif state == "waiting":
        producer.enqueue("t", id, task_id=id, after=[("default", "P")])
    elif state == "blocked":  # its key is held by a scheduled task: it waits behind it
        producer.enqueue("t", "holder", task_id=f"h.{id}", key=f"k.{id}", process_in=3600)
        producer.enqueue("t", id, task_id=id, key=f"k.{id}")
    elif state == "grouped":
        producer.enqueue("t", id, task_id=id, group=f"g.{id}")
    elif state == "targeted":
        producer.enqueue("t", id, task_id=id, workers=["w1"])
    elif state == "tenant":
        producer.enqueue("t", id, task_id=id, tenant="acme")
    else:  # pragma: no cover
        raise AssertionError(state)


def _verifies(backend: Any, id: str) -> bool | None:
    """Whether the task's stored message verifies with KEY (None: the task is gone)."""
    value = backend.sync.hget(K.tasks, id)
    if value is None:
        return None
    try:
        Signer(KEY).open("default", id, message_of(value))
    except SignatureError:
        return False
    return True


def _drive(backend: Any, signed: bool) -> tuple[dict[str, bool | None], list[Any], dict[str, str]]:
    producer = Client(backend.sync, signing_key=KEY) if signed else Client(backend.sync)
    insp = Inspector(backend.sync, signing_key=KEY)
    outcome: dict[str, str] = {}
    ids = [f"{state}.{action}" for state in sorted(STATES, key=lambda s: s not in _FIRST) for action in ACTIONS]
    for id in ids:
        if id == "pending.edit":  # after the active and retry ones: the parent of the waiting ones
            producer.enqueue("t", "parent", task_id="P", max_retry=0, process_in=1)
        _plant(backend, producer, insp, id.split(".")[0], id)
    assert Inspector(backend.sync).task_info("default", "active.none").state is TaskState.ACTIVE
    assert Inspector(backend.sync).task_info("default", "retry.none").state is TaskState.RETRY
    global _console
    _copies.clear()
    with TestClient(create_app(backend.new_async(), signing_key=KEY), base_url="http://localhost") as _console:
        _console.get("/livez")  # (the CSRF cookie)
        for id in ids:
            try:
                ACTIONS[id.split(".")[1]](insp, id)
                outcome[id] = "ok"
            except SignatureError:
                outcome[id] = "refused"
            except AsynqpyError as exc:  # not allowed in that state (e.g. edit an active task)
                outcome[id] = type(exc).__name__
    _console = None
    ran: list[Any] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        if task.payload == "parent" and not signed:
            raise AssertionError("an unsigned parent must not run")
        if task.payload == "parent":
            raise RuntimeError("the parent fails: its waiting children are cancelled")
        ran.append(task.id)

    async def main() -> None:
        async with serving(backend.new_async(), mux, signing_key=KEY, lease=1, name="w1",
                           recover_interval=0.2, retry_delay=lambda n, e, t: 3600.0):
            # the parent ends (refused or failed), its children are cancelled; expired leases recovered
            await until(lambda: Inspector(backend.sync).task_info("default", "P").state
                        in (TaskState.ARCHIVED, TaskState.RETRY), timeout=20)
            await until(lambda: all(Inspector(backend.sync).task_info("default", f"waiting.{a}").state
                                    is not TaskState.WAITING for a in ACTIONS if _verifies(backend, f"waiting.{a}")
                                    is not None), timeout=20)
            await until(lambda: backend.sync.zcard(K.lease) == 0 and backend.sync.llen(K.pending) == 0
                        and backend.sync.zcard(K.tq) == 0, timeout=20)

    asyncio.run(main())
    return {id: _verifies(backend, id) for id in ids}, ran, outcome


def test_no_path_re_signs_an_unverified_message_in_any_state(backend: Any) -> None:
    verified, ran, outcome = _drive(backend, signed=False)
    assert ran == [], f"unverified tasks ran: {ran}"
    signed_now = sorted(id for id, v in verified.items() if v)
    assert not signed_now, f"re-signed without verification: {signed_now}"
    # each action met every state: either refused for its signature, not allowed there, or done unsigned
    assert {outcome[f"pending.{a}"] for a in ("edit",)} == {"refused"}
    assert outcome["active.cancel"] == "ok"
    assert outcome["tenant.edit"] == "refused" and outcome["tenant_active.cancel"] == "ok"
    assert {outcome[f"{state}.duplicate"] for state in STATES} == {"refused"} and not _copies  # the console too
    assert not backend.sync.exists(K.ta)  # no slot kept by an unverified tenant task, whatever ended it


def test_the_control_signed_messages_stay_signed(backend: Any) -> None:
    """The control: the same paths on signed messages re-sign what they rewrite, so the check of
    the test above is not vacuous."""
    verified, ran, outcome = _drive(backend, signed=True)
    assert outcome["pending.edit"] == "ok" and "pending.edit" in ran  # edited, re-signed, and run
    assert outcome["tenant.edit"] == "ok" and "tenant.edit" in ran and "tenant.none" in ran
    assert outcome["scheduled.edit"] == "ok" and verified["scheduled.edit"] is True
    assert {outcome[f"{state}.duplicate"] for state in STATES} == {"ok"} and len(_copies) == len(STATES)
    assert all(_verifies(backend, id) is not False for id in _copies)  # each copy signed (or run and gone)
    assert len(set(_copies) & set(ran)) >= len(STATES) - 3  # and run (not those behind a key, a group)
    unsigned_now = sorted(id for id, v in verified.items() if v is False)
    assert not unsigned_now, f"signed tasks stored unsigned: {unsigned_now}"
