"""Editing queued tasks (Inspector.edit_task, `asynqpy task edit`): payload, max_retry and due time
of pending, scheduled and retry tasks; typed refusals that change nothing; signed tasks signed
again. On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from asynqpy import Client, Inspector, InvalidArgumentError, TaskNotFoundError, TaskState, TaskStateError
from asynqpy.core.model.codec import decode
from asynqpy.core.security.signing import make_signer, open_message
from asynqpy.core.spine.keys import queue_keys

Q = "eq"


def _stored(backend: Any, id: str) -> bytes:
    return backend.sync.hget(queue_keys(Q).tasks, id)  # type: ignore[no-any-return]


def test_edit_payload_retries_and_due_time(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("t", {"v": 1}, queue=Q, task_id="p1")
        c.enqueue("t", {"v": 2}, queue=Q, task_id="s1", process_in=3600)
        info = insp.edit_task(Q, "p1", payload={"v": 10}, max_retry=7)
        assert (info.state, info.payload, info.max_retry) == (TaskState.PENDING, {"v": 10}, 7)
        info = insp.edit_task(Q, "p1", process_in=120)  # due later: pending -> scheduled
        assert info.state is TaskState.SCHEDULED and info.next_process_at is not None
        assert 110 < info.next_process_at.timestamp() - time.time() < 130
        assert insp.list_tasks(Q, TaskState.PENDING) == []
        info = insp.edit_task(Q, "s1", process_in=0)  # promoted to now
        assert info.state is TaskState.PENDING and info.payload == {"v": 2}
        at = time.time() + 7200
        info = insp.edit_task(Q, "p1", process_at=at)  # a scheduled task's new time
        assert info.state is TaskState.SCHEDULED and abs(info.next_process_at.timestamp() - at) < 0.01  # type: ignore[union-attr]
        assert [t.id for t in insp.list_tasks(Q, TaskState.PENDING)] == ["s1"]
        # a retry task stays a retry at a new time, or runs now
        backend.sync.hset(queue_keys(Q).tasks, "r1", b"r" + _stored(backend, "p1")[1:])
        backend.sync.zadd(queue_keys(Q).retry, {"r1": int(time.time() * 1000) + 600_000})
        info = insp.edit_task(Q, "r1", process_in=30, payload="x")
        assert info.state is TaskState.RETRY and info.payload == "x"
        assert 25 < info.next_process_at.timestamp() - time.time() < 35  # type: ignore[union-attr]
        assert insp.edit_task(Q, "r1", process_in=0).state is TaskState.PENDING
        events = [e.event for e in insp.events(Q)]
        assert events.count("edited") == 6


def test_refusals_name_the_problem_and_change_nothing(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue("t", {"v": 1}, queue=Q, task_id="u1", unique=600)
        c.enqueue("t", {"v": 1}, queue=Q, task_id="p1")
        c.enqueue("t", None, queue=Q, task_id="done", retention=600)
        before = {id: _stored(backend, id) for id in ("u1", "p1")}
        # an active, a completed and an archived task
        q = queue_keys(Q)
        backend.sync.hset(q.tasks, "act", b"atok00001" + _stored(backend, "p1")[1:])
        backend.sync.zadd(q.lease, {"act": int(time.time() * 1000) + 60_000})
        for id, st, z in (("fin", b"c", q.completed), ("arc", b"x", q.archived)):
            backend.sync.hset(q.tasks, id, st + _stored(backend, "p1")[1:])
            backend.sync.zadd(z, {id: int(time.time() * 1000) + 60_000})
        cases: list[tuple[str, dict[str, Any], type[Exception], str]] = [
            ("act", {"payload": 1}, TaskStateError, "cannot edit task 'act': it is active (running): cancel it"),
            ("fin", {"payload": 1}, TaskStateError, "cannot edit task 'fin': it is completed"),
            ("arc", {"max_retry": 1}, TaskStateError, "cannot edit task 'arc': it is archived"),
            ("nope", {"payload": 1}, TaskNotFoundError, "task 'nope' not found in queue 'eq'"),
            ("u1", {"payload": 2}, InvalidArgumentError, "is unique"),
            ("p1", {}, InvalidArgumentError, "nothing to change"),
            ("p1", {"paylod": 1}, InvalidArgumentError, "did you mean 'payload'"),
            ("p1", {"max_retry": -1}, InvalidArgumentError, "max_retry must be an int >= 0"),
            ("p1", {"process_in": -5}, InvalidArgumentError, "process_in must be >= 0"),
            ("p1", {"process_in": 5, "process_at": 10}, InvalidArgumentError, "not both"),
            ("p1", {"payload": object()}, Exception, "not msgpack-serializable"),
        ]
        for id, changes, error, message in cases:
            with pytest.raises(error, match=re.escape(message)):
                insp.edit_task(Q, id, **changes)
        assert {id: _stored(backend, id) for id in ("u1", "p1")} == before  # nothing changed
        assert insp.edit_task(Q, "u1", max_retry=1).max_retry == 1  # a unique task's other fields may change


def test_a_deep_pending_task_moves_to_scheduled(backend: Any) -> None:
    with Client(backend.sync) as c, Inspector(backend.sync) as insp:
        c.enqueue_many([("t", i, {"task_id": f"t{i}"}) for i in range(60)], queue=Q)
        insp._plans.window = 5  # the id is deep: located page by page, then taken out with a placeholder
        info = insp.edit_task(Q, "t30", process_in=60)
        assert info.state is TaskState.SCHEDULED
        pending = {t.id for t in insp.list_tasks(Q, TaskState.PENDING, page_size=100)}
        assert len(pending) == 59 and "t30" not in pending and insp.queue_info(Q).scheduled == 1


def test_signed_tasks_are_signed_again(backend: Any) -> None:
    key = b"k" * 32
    with Client(backend.sync, signing_key=key) as c:
        c.enqueue("t", 1, queue=Q, task_id="s")
    with Inspector(backend.sync) as insp, pytest.raises(InvalidArgumentError, match="is signed: give the Inspector"):
        insp.edit_task(Q, "s", payload=2)
    with Inspector(backend.sync, signing_key=key) as insp:
        insp.edit_task(Q, "s", payload=2)
    stored = _stored(backend, "s")
    assert open_message(make_signer(key), Q, "s", stored[1:]).payload == 2  # verifies
    assert decode(stored[1:]).payload == 2


@pytest.mark.real
def test_task_edit_command(redis_url: str) -> None:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    def cli(*args: str) -> tuple[int, str, str]:
        res = CliRunner().invoke(main, ["task", *args, "--redis-url", redis_url])
        return res.exit_code, res.stdout, res.stderr

    with Client(redis_url) as c:
        c.enqueue("t", 1, queue=Q, task_id="a")
    code, out, err = cli("edit", "-q", Q, "--id", "a", "--payload", '{"n": 2}', "--in", "60")
    assert code == 0 and out.startswith("edited task a (queue eq): scheduled (due "), err
    code, out, _ = cli("edit", "-q", Q, "--id", "a", "--in", "0", "--json")
    assert code == 0 and '"state": "pending"' in out and '"n": 2' in out
    for args, message in [
        (("--id", "a"), "nothing to change: give --payload, --max-retry, --priority, --at or --in"),
        (("--id", "a", "--payload", "{x"), "--payload is not JSON"),
        (("--id", "a", "--in", "1", "--at", "2030-01-01T00:00Z"), "give --at or --in, not both"),
        (("--id", "zz", "--max-retry", "1"), "task 'zz' not found in queue 'eq'"),
    ]:
        code, _, err = cli("edit", "-q", Q, *args)
        assert code == 2 and err.startswith(f"asynqpy: error: {message}") and err.count("\n") == 1, err
