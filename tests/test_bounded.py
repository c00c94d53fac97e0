"""Bounded queues (issue 43 item 5; docs/queues.md "Bounded queues"): ``Inspector.set_queue_cap`` and
``set_tenant(..., max_pending=)``, enforced by lua/includes/cap.lua in the producer entry scripts
(enqueue, enqueue_many, keyed). ``reject``: a call past the cap raises QueueFullError and stores
nothing (a batch is refused whole) while nothing already queued is touched; ``drop_oldest``: it is
accepted and the oldest droppable pending tasks (no key=, not unique) are archived with the reason
in their event; tasks already accepted that become pending later are never refused (counted, the
count may pass the cap). Counts in queue_info, the metrics, the CLI and the console. On
fakeredis, redis-server and the Cluster."""

from __future__ import annotations

import time
from typing import Any

import pytest

from asynqpy import Client, Inspector, InvalidArgumentError, QueueCap, QueueFullError, TaskState
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

Q = "bq"
K = queue_keys(Q)


def _pending(insp: Inspector) -> list[Any]:
    return [t.payload for t in insp.list_tasks(Q, "pending", page_size=1000)]


def _state(backend: Any) -> dict[bytes, bytes]:
    """Every task's stored value (what 'nothing touched' compares)."""
    return dict(backend.sync.hgetall(K.tasks))


def _dropped_events(insp: Inspector) -> list[tuple[str, str]]:
    return [(e.task_id, e.error) for e in insp.events(Q) if e.event == "archived"]


def test_reject_refuses_the_call_whole_and_touches_nothing(backend: Any) -> None:
    c, insp = Client(backend.sync), Inspector(backend.sync)
    for i in range(3):
        c.enqueue("t", i, queue=Q, priority=(5, 7, 2)[i])
    assert insp.set_queue_cap(Q, 3) == QueueCap(3, "reject")
    before = _state(backend)
    with pytest.raises(QueueFullError) as err:
        c.enqueue("t", 3, queue=Q)
    assert err.value.queue == Q and err.value.count == 1
    with pytest.raises(QueueFullError) as err:
        c.enqueue_many([("t", 4), ("t", 5)], queue=Q)
    assert err.value.count == 2
    with pytest.raises(QueueFullError):
        c.enqueue("t", 6, queue=Q, key="k")  # keyed: a producer entry too
    with pytest.raises(QueueFullError):
        c.enqueue_many([("t", 7), ("t", 8)], queue=Q, key="k2")  # the keyed batch path
    assert _state(backend) == before  # nothing stored, nothing already queued touched
    info = insp.queue_info(Q)
    assert (info.pending, info.max_pending, info.overflow, info.rejected, info.dropped) == (3, 3, "reject", 6, 0)
    insp.set_queue_cap(Q, 4)
    with pytest.raises(QueueFullError):
        c.enqueue_many([("t", 4), ("t", 5)], queue=Q)  # a batch that does not fit whole: refused whole
    c.enqueue("t", 4, queue=Q)
    assert sorted(_pending(insp)) == [0, 1, 2, 4]
    insp.set_queue_cap(Q, None)  # None removes the cap
    assert insp.queue_cap(Q).max_pending is None
    c.enqueue_many([("t", 5), ("t", 6)], queue=Q)
    assert insp.queue_info(Q).pending == 6


def test_a_call_sent_again_is_its_own_not_a_refusal(backend: Any) -> None:
    """A caller-chosen id enqueued again (a resend after a lost reply) at a full queue is the
    task already stored: success, not QueueFullError."""
    c, insp = Client(backend.sync), Inspector(backend.sync)
    c.enqueue("t", 1, queue=Q, task_id="mine")
    insp.set_queue_cap(Q, 1)
    c.enqueue("t", 1, queue=Q, task_id="mine")
    assert insp.queue_info(Q).rejected == 0
    with pytest.raises(QueueFullError):
        c.enqueue("t", 2, queue=Q, task_id="other")


def test_drop_oldest_archives_the_oldest_with_its_reason(backend: Any) -> None:
    c, insp = Client(backend.sync), Inspector(backend.sync)
    insp.set_queue_cap(Q, 3, "drop_oldest")
    ids = []
    for i in range(5):  # (a ms apart at least: the oldest is the first enqueued, whatever the lane)
        ids.append(c.enqueue("t", i, queue=Q, priority=(5, 8, 1, 5, 5)[i]).id)
        time.sleep(0.002)
    # the oldest by enqueue time go, whatever their priority
    assert sorted(_pending(insp)) == [2, 3, 4]
    archived = {t.id: t for t in insp.list_tasks(Q, "archived")}
    assert set(archived) == set(ids[:2])
    assert sorted(_dropped_events(insp)) == sorted((i, "dropped: queue full") for i in ids[:2])
    info = insp.queue_info(Q)
    assert (info.pending, info.archived, info.dropped, info.rejected) == (3, 2, 2, 0)
    c.enqueue_many([("t", 5), ("t", 6)], queue=Q)  # a batch drops as many as it needs
    assert sorted(_pending(insp)) == [4, 5, 6]
    assert insp.queue_info(Q).dropped == 4
    with pytest.raises(QueueFullError):  # larger than the cap itself: refused whole, nothing dropped
        c.enqueue_many([("t", i) for i in range(7, 11)], queue=Q)
    assert sorted(_pending(insp)) == [4, 5, 6]


def test_drop_oldest_never_drops_keyed_or_unique_tasks(backend: Any) -> None:
    """A keyed task holds its key and a unique one its lock: the drop passes them by; with nothing
    else to drop the enqueue is refused (QueueFullError), never a task lost or a key stranded."""
    c, insp = Client(backend.sync), Inspector(backend.sync)
    c.enqueue("t", "keyed", queue=Q, key="k")
    c.enqueue("t", "unique", queue=Q, unique=60)
    c.enqueue("t", "plain", queue=Q)
    insp.set_queue_cap(Q, 3, "drop_oldest")
    c.enqueue("t", "new", queue=Q)
    assert sorted(_pending(insp)) == ["keyed", "new", "unique"]
    c.enqueue("t", "newer", queue=Q)  # "new" is the only droppable one
    assert sorted(_pending(insp)) == ["keyed", "newer", "unique"]
    insp.set_queue_cap(Q, 2, "drop_oldest")  # lowered below what is pending: a call drops what it adds
    c.enqueue("t", "x", queue=Q, unique=30)  # "newer" goes for it: 3 pending stay over the cap of 2
    assert sorted(_pending(insp)) == ["keyed", "unique", "x"]
    before = _state(backend)
    with pytest.raises(QueueFullError):  # nothing droppable left: refused
        c.enqueue("t", "y", queue=Q)
    assert _state(backend) == before
    info = insp.queue_info(Q)
    assert (info.dropped, info.rejected) == (3, 1)


def test_tenant_caps(backend: Any) -> None:
    c, insp = Client(backend.sync), Inspector(backend.sync)
    insp.set_tenant(Q, "a", max_pending=2)
    assert insp.queue_cap(Q, "a") == QueueCap(2, "reject", tenant="a")
    for i in range(2):
        c.enqueue("t", f"a{i}", queue=Q, tenant="a")
    with pytest.raises(QueueFullError):
        c.enqueue("t", "a2", queue=Q, tenant="a")
    c.enqueue("t", "b0", queue=Q, tenant="b")  # the others go on
    c.enqueue("t", "p0", queue=Q)
    insp.set_tenant(Q, "b", max_pending=1, overflow="drop_oldest")
    c.enqueue("t", "b1", queue=Q, tenant="b")  # drops b0, b's oldest: not a0, older
    assert sorted(_pending(insp)) == ["a0", "a1", "b1", "p0"]
    assert [t.payload for t in insp.list_tasks(Q, "archived")] == ["b0"]
    assert insp.tenants(Q)[1].pending == 1
    insp.set_tenant(Q, "a", max_pending=None, weight=2)  # removed, beside another setting
    assert insp.queue_cap(Q, "a").max_pending is None
    c.enqueue("t", "a2", queue=Q, tenant="a")
    info = insp.queue_info(Q)
    assert (info.rejected, info.dropped) == (1, 1)


def test_tasks_already_accepted_are_counted_never_refused(backend: Any) -> None:
    """Scheduled tasks that come due, and an operator's run, make tasks pending past the cap: they
    were accepted before; the cap then refuses the producers until the queue drains."""
    c, insp = Client(backend.sync), Inspector(backend.sync)
    c.enqueue("t", "due", queue=Q, process_in=0.001)
    done = c.enqueue("t", "old", queue=Q)
    c.enqueue("t", "p", queue=Q)
    insp.archive_task(Q, done.id)
    insp.set_queue_cap(Q, 1)
    time.sleep(0.01)
    x, b = SyncExecutor(backend.sync), Broker()
    x.run(b.forward(Q))
    insp.run_task(Q, done.id)
    assert sorted(_pending(insp)) == ["due", "old", "p"]  # 3 pending under a cap of 1
    with pytest.raises(QueueFullError):
        c.enqueue("t", "new", queue=Q)


def test_bad_input_is_a_typed_error_and_changes_nothing(backend: Any) -> None:
    c, insp = Client(backend.sync), Inspector(backend.sync)
    c.enqueue("t", 1, queue=Q)
    insp.set_queue_cap(Q, 5, "drop_oldest")
    for args, kwargs in [((0,), {}), ((-1,), {}), ((True,), {}), (("5",), {}), ((2.5,), {}),
                         ((5,), {"overflow": "drop_newest"}), ((None,), {"overflow": "nope"})]:
        with pytest.raises(InvalidArgumentError):
            insp.set_queue_cap(Q, *args, **kwargs)
    with pytest.raises(InvalidArgumentError):
        insp.set_tenant(Q, "a", max_pending=-3)
    with pytest.raises(InvalidArgumentError):
        insp.set_tenant(Q, "a", max_pending=2, weight=0)  # a bad setting beside it: nothing written
    assert insp.queue_cap(Q, "a").max_pending is None
    assert insp.queue_cap(Q) == QueueCap(5, "drop_oldest")
    assert _pending(insp) == [1]


def test_dropped_parent_tells_its_children(backend: Any) -> None:
    """A dropped task's workflow children are told it was archived (includes/exit), as when an
    operator archives it: none waits forever."""
    c, insp = Client(backend.sync), Inspector(backend.sync)
    parent = c.enqueue("t", "parent", queue=Q)
    c.enqueue("t", "child", queue=Q, after=[parent.id])
    insp.set_queue_cap(Q, 1, "drop_oldest")
    c.enqueue("t", "new", queue=Q)
    assert insp.task_info(Q, parent.id).state is TaskState.ARCHIVED
    assert backend.sync.xlen(K.outbox) == 1  # the parent's end, on its way to the child


def test_metrics_and_console(backend: Any) -> None:
    if backend.kind == "cluster":
        pytest.skip("reads one queue: the metrics and the page are the same on every backend")
    from prometheus_client import CollectorRegistry, generate_latest

    from asynqpy.metrics import QueueCollector

    c, insp = Client(backend.sync), Inspector(backend.sync)
    insp.set_queue_cap(Q, 1, "drop_oldest")
    c.enqueue("t", 1, queue=Q)
    c.enqueue("t", 2, queue=Q)
    reg = CollectorRegistry()
    reg.register(QueueCollector(insp))
    text = generate_latest(reg).decode()
    assert 'asynqpy_queue_max_pending{overflow="drop_oldest",queue="bq"} 1.0' in text
    assert 'asynqpy_tasks_dropped_total{queue="bq"} 1.0' in text
    assert 'asynqpy_tasks_rejected_total{queue="bq"} 0.0' in text


@pytest.mark.real
def test_queue_cap_command_and_enqueue_refusal(redis_url: str) -> None:
    """``asynqpy queue cap``: set, show, per tenant, clear; bad input is one line on stderr and
    exit code 2, and changes nothing; ``asynqpy enqueue`` at a full queue exits 2 with one line."""
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    def cli(*args: str) -> tuple[int, str, str]:
        res = CliRunner().invoke(main, [*args, "--redis-url", redis_url])
        return res.exit_code, res.stdout, res.stderr

    Client(redis_url).enqueue("t", 1, queue=Q)
    assert cli("queue", "cap", Q) == (0, "queue bq: no cap (queue's caps: rejected 0, dropped 0)\n", "")
    assert cli("queue", "cap", Q, "1")[:2] == (0, "queue bq: at most 1 pending, reject (queue's caps: rejected 0, "
                                                  "dropped 0)\n")
    code, out, err = cli("enqueue", "t", "--queue", Q)
    assert (code, out) == (2, "") and err.startswith("asynqpy: error: queue 'bq' is full") and err.count("\n") == 1
    for bad in (["-1"], ["0"], ["x"], ["2", "--overflow", "drop_newest"], ["--clear", "3"]):
        code, out, err = cli("queue", "cap", Q, *bad)
        assert (code, out) == (2, "") and err.startswith("asynqpy: error: ") and err.count("\n") == 1, (bad, err)
    code, out, _ = cli("queue", "cap", Q, "--json")
    assert code == 0 and '"max_pending": 1' in out and '"rejected": 1' in out
    assert cli("queue", "cap", Q, "2", "--tenant", "a", "--overflow", "drop_oldest")[:2] == (
        0, "tenant a of queue bq: at most 2 pending, drop_oldest (queue's caps: rejected 1, dropped 0)\n")
    code, out, _ = cli("queue", "inspect", Q)
    assert code == 0 and "1 pending, reject · rejected 1 · dropped 0" in out
    assert cli("queue", "cap", Q, "--clear")[:2] == (0, "queue bq: no cap (queue's caps: rejected 1, dropped 0)\n")
    assert Inspector(redis_url).queue_info(Q).pending == 1  # nothing queued was lost along the way


@pytest.mark.real
def test_console_queue_page_shows_the_cap(redis_url: str) -> None:
    from fastapi.testclient import TestClient

    from asynqpy.web import create_app

    c, insp = Client(redis_url), Inspector(redis_url)
    c.enqueue("t", 1, queue=Q)
    with TestClient(create_app(redis_url), base_url="http://localhost") as tc:
        assert 'id="queue-cap"' not in tc.get(f"/queues/{Q}").text
        insp.set_queue_cap(Q, 1, "drop_oldest")
        c.enqueue("t", 2, queue=Q)
        page = tc.get(f"/queues/{Q}").text
    assert '<span id="cap-max">1</span>' in page and '<span id="cap-overflow">drop_oldest</span>' in page
    assert '<span id="cap-dropped">1</span>' in page and '<span id="cap-rejected">0</span>' in page
