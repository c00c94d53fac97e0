"""The transactional outbox (asynqpy/outbox.py): a task written in the caller's transaction, sent
once committed, each exactly once (relay crashes, several relays), every option passed through.
SQLite with the in-process Redis (memory://) for the cheap cases; the real PostgreSQL and
redis-server (started by the session) where PostgreSQL's locking, NOTIFY or a real kill matter."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.orm import Session

from asynqpy import Inspector
from asynqpy.cli.main import main
from asynqpy.core.errors import InvalidArgumentError, PayloadError, QueueNotFoundError, TaskNotFoundError
from asynqpy.core.task import TaskState
from asynqpy.outbox import AsyncOutbox, Outbox, Relay

_names = itertools.count()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'app.db'}"


@pytest.fixture
def mem_url() -> str:
    return f"memory://outbox-{os.getpid()}-{next(_names)}"


def _outbox(url: str) -> Outbox:
    ob = Outbox(sa.create_engine(url))
    ob.create_table()
    return ob


def _count(ob: Outbox) -> int:
    with ob.engine.connect() as c:
        return int(c.execute(sa.select(sa.func.count()).select_from(ob.table)).scalar_one())


def _info(redis_url: str, queue: str, id: str) -> Any:
    ins = Inspector(redis_url)
    try:
        return ins.task_info(queue, id)
    finally:
        ins.close()


def _ids(redis_url: str, queue: str = "default") -> list[str]:
    ins = Inspector(redis_url)
    try:
        return [t.id for t in ins.list_tasks(queue, "pending", page_size=1000)]
    except QueueNotFoundError:
        return []
    finally:
        ins.close()


def until(pred: Any, timeout: float) -> None:
    """Poll ``pred`` until true; fail after ``timeout`` s (a hang, not a timing)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.01)


# -- the producer's side ---------------------------------------------------------------------------


def test_rollback_never_enqueues_and_commit_enqueues_once(sqlite_url: str, mem_url: str) -> None:
    ob = _outbox(sqlite_url)
    with Session(ob.engine) as s:
        s.begin()
        ob.enqueue(s, "email:send", {"to": "a"})
        s.rollback()
    with Session(ob.engine) as s, s.begin():
        id = ob.enqueue(s, "email:send", {"to": "b"})
    relay = Relay(ob.engine, mem_url)
    assert relay.relay_once().stored == 1
    assert relay.relay_once().rows == 0 and _count(ob) == 0
    assert _ids(mem_url) == [id]
    info = _info(mem_url, "default", id)
    assert info.type == "email:send" and info.payload == {"to": "b"}


def test_options_pass_through(sqlite_url: str, mem_url: str) -> None:
    ob = _outbox(sqlite_url)
    with Session(ob.engine) as s, s.begin():
        later = ob.enqueue(s, "t", 1, process_in=60)
        first = ob.enqueue(s, "t", 2, unique=60)
        dup = ob.enqueue(s, "t", 2, unique=60)  # refused by Redis when relayed, as Client.enqueue would
        keyed = ob.enqueue(s, "t", 3, key="order:1", queue="orders")
        high = ob.enqueue(s, "t", 4, priority=9, queue="critical", max_retry=3, headers={"h": "v"})
        mine = ob.enqueue(s, "t", 5, task_id="my-id")
    before = time.time()
    sent = Relay(ob.engine, mem_url).relay_once()
    assert (sent.stored, sent.refused) == (5, 1)
    scheduled = _info(mem_url, "default", later)
    assert scheduled.state is TaskState.SCHEDULED
    assert before + 50 < scheduled.next_process_at.timestamp() < before + 61  # due from the enqueue, not the relay
    assert _info(mem_url, "default", first).state is TaskState.PENDING
    with pytest.raises(TaskNotFoundError):
        _info(mem_url, "default", dup)
    assert _info(mem_url, "orders", keyed).key == "order:1"
    h = _info(mem_url, "critical", high)
    assert (h.priority, h.max_retry, h.headers) == (9, 3, {"h": "v"})
    assert mine == "my-id" and _info(mem_url, "default", "my-id").payload == 5


def test_after_parents_in_the_same_transaction_and_a_missing_one(sqlite_url: str, mem_url: str) -> None:
    """A task with after= is registered with its parents when relayed, after the parents written
    before it in the same batch are stored; a missing parent refuses it (logged, row deleted), as
    Client.enqueue would raise TaskNotFoundError."""
    ob = _outbox(sqlite_url)
    with Session(ob.engine) as s, s.begin():
        parent = ob.enqueue(s, "p", 1, queue="a")
        child = ob.enqueue(s, "c", 2, after=[("a", parent)], on_parent_failure="run")
        orphan = ob.enqueue(s, "c", 3, after=["nobody"])
    relay = Relay(ob.engine, mem_url)
    dying_send = relay._send
    calls: list[Any] = []

    def send_then_die(tasks: Any) -> Any:
        calls.append(dying_send(tasks))
        raise _Died

    relay._send = send_then_die  # type: ignore[method-assign]
    with pytest.raises(_Died):
        relay.relay_once()
    assert (calls[0][0].stored, calls[0][0].refused) == (2, 1)
    sent = Relay(ob.engine, mem_url).relay_once()  # again after the crash: nothing twice
    assert (sent.stored, sent.already, sent.refused) == (0, 2, 1) and _count(ob) == 0
    info = _info(mem_url, "default", child)
    assert info.state is TaskState.WAITING and [p.id for p in info.parents] == [parent]
    with pytest.raises(TaskNotFoundError):
        _info(mem_url, "default", orphan)


@pytest.mark.parametrize("options, error", [
    ({"priorty": 9}, InvalidArgumentError),  # unknown (with a suggestion)
    ({"priority": 10}, InvalidArgumentError),
    ({"process_in": -1}, InvalidArgumentError),
    ({"unique": 60, "throttle": 10}, InvalidArgumentError),  # a conflict
    ({"after": ["p"], "group": "g"}, InvalidArgumentError),  # a conflict of after=
    ({"on_conflict": "return", "task_id": "x"}, InvalidArgumentError),  # the Client's alone
])
def test_bad_options_raise_before_the_row_is_written(sqlite_url: str, options: dict[str, Any],
                                                     error: type[Exception]) -> None:
    ob = _outbox(sqlite_url)
    with Session(ob.engine) as s, s.begin():
        with pytest.raises(error):
            ob.enqueue(s, "t", None, **options)
        with pytest.raises(PayloadError):
            ob.enqueue(s, "t", object())
        with pytest.raises(InvalidArgumentError):
            ob.enqueue(s, "", None)
    assert _count(ob) == 0


def test_ddl_for_a_migration_makes_a_working_table(sqlite_url: str, mem_url: str) -> None:
    engine = sa.create_engine(sqlite_url)
    ob = Outbox(engine)
    with engine.begin() as c:
        for stmt in ob.ddl("sqlite"):
            c.execute(sa.text(stmt))
    with Session(engine) as s, s.begin():
        ob.enqueue(s, "t")
    assert Relay(engine, mem_url).relay_once().stored == 1
    assert any("pg_notify" in stmt for stmt in ob.ddl("postgresql"))


def test_async_outbox_on_aiosqlite(tmp_path: Path, mem_url: str) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def produce() -> list[str]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
        ob = AsyncOutbox(engine)
        await ob.create_table()
        async with AsyncSession(engine) as s:
            async with s.begin():
                ids = [await ob.enqueue(s, "t", i) for i in range(3)]
            await s.begin()
            await ob.enqueue(s, "t", "gone")
            await s.rollback()
        await engine.dispose()
        return ids

    ids = asyncio.run(produce())
    assert Relay(f"sqlite:///{tmp_path / 'a.db'}", mem_url).relay_once().stored == 3
    assert sorted(_ids(mem_url)) == sorted(ids)


# -- exactly once -----------------------------------------------------------------------------------


class _Died(BaseException):
    """The relay process dying (as SIGKILL would) between Redis's reply and the delete's commit."""


def test_a_relay_dying_after_redis_stored_sends_nothing_twice(sqlite_url: str, mem_url: str) -> None:
    ob = _outbox(sqlite_url)
    with Session(ob.engine) as s, s.begin():
        ids = [ob.enqueue(s, "t", i) for i in range(3)]
    dying = Relay(ob.engine, mem_url)
    send = dying._send

    def send_then_die(tasks: Any) -> Any:
        send(tasks)
        raise _Died

    dying._send = send_then_die  # type: ignore[method-assign]
    with pytest.raises(_Died):
        dying.relay_once()
    assert _count(ob) == 3  # rolled back: the rows are still there
    ins = Inspector(mem_url)
    ins.delete_task("default", ids[0])  # ran and finished meanwhile: gone from Redis
    ins.close()
    sent = Relay(ob.engine, mem_url).relay_once()
    assert (sent.stored, sent.already) == (0, 3) and _count(ob) == 0
    assert sorted(_ids(mem_url)) == sorted(ids[1:])  # the finished one was not enqueued again


_KILLED_CHILD = textwrap.dedent("""
    import os, signal, sys
    from asynqpy.outbox import Relay
    relay = Relay(sys.argv[1], sys.argv[2])
    send = relay._send
    def send_then_die(tasks):
        out = send(tasks)
        os.kill(os.getpid(), signal.SIGKILL)
        return out
    relay._send = send_then_die
    relay.relay_once()
""")


@pytest.mark.real
def test_a_relay_sigkilled_between_redis_and_the_delete_on_postgres(pg_url: str, redis_url: str) -> None:
    ob = _outbox(pg_url)
    with Session(ob.engine) as s, s.begin():
        ids = [ob.enqueue(s, "t", i) for i in range(5)]
    child = subprocess.run([sys.executable, "-c", _KILLED_CHILD, pg_url, redis_url], timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert _count(ob) == 5  # PostgreSQL rolled its delete back when its connection died
    assert sorted(_ids(redis_url)) == sorted(ids)  # ... after Redis had stored them
    ins = Inspector(redis_url)
    ins.delete_task("default", ids[0])  # one ran and finished meanwhile
    ins.close()
    sent = Relay(pg_url, redis_url).relay_once()
    assert (sent.stored, sent.already) == (0, 5) and _count(ob) == 0
    assert sorted(_ids(redis_url)) == sorted(ids[1:])


@pytest.mark.real
@pytest.mark.parametrize("ordered", [True, False])
def test_two_relays_at_once_send_each_row_once(pg_url: str, redis_url: str, ordered: bool) -> None:
    """Two relays draining one outbox at once: each row sent once; ordered (the default), they
    take turns and the tasks keep their commit order; unordered, each skips the other's locked
    rows (SKIP LOCKED) and both work."""
    ob = _outbox(pg_url)
    with Session(ob.engine) as s, s.begin():
        ids = [ob.enqueue(s, "t", i) for i in range(400)]
    totals: dict[int, list[Any]] = {0: [], 1: []}

    def drain(n: int, relay: Relay) -> None:
        idle = 0
        while idle < 3:  # (an ordered relay finds nothing while the other one has its turn)
            sent = relay.relay_once()
            totals[n].append(sent)
            idle = 0 if sent.rows else idle + 1
            time.sleep(0 if sent.rows else 0.01)

    relays = [Relay(sa.create_engine(pg_url), redis_url, batch=20, ordered=ordered) for _ in range(2)]
    with relays[0].engine.connect() as conn, conn.begin():  # relay 0 in the middle of a batch
        if ordered:
            assert conn.execute(relays[0]._turn).scalar()
        assert len(conn.execute(relays[0]._take).all()) == 20
        # relay 1 is not blocked: it waits for its turn (ordered), or takes the next rows (unordered)
        assert relays[1].relay_once().stored == (0 if ordered else 20)
        conn.rollback()  # (relay 0 died: its rows are back)
    threads = [threading.Thread(target=drain, args=(n, r)) for n, r in enumerate(relays)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    every = totals[0] + totals[1]
    assert sum(s.stored for s in every) == (400 if ordered else 380) and sum(s.already for s in every) == 0
    assert _count(ob) == 0
    if ordered:
        assert _ids(redis_url) == ids  # one producer's commit order
    else:
        assert sorted(_ids(redis_url)) == sorted(ids)


@pytest.mark.real
def test_order_of_a_producer_and_notify_wakes_the_relay(pg_url: str, redis_url: str) -> None:
    """One producer's tasks arrive in its commit order; the relay, polling only every 60 s,
    is woken by NOTIFY at each commit."""
    ob = _outbox(pg_url)
    relay = Relay(pg_url, redis_url, poll=60)
    thread = relay.start()
    try:
        ids = []
        for i in range(3):
            with Session(ob.engine) as s, s.begin():
                ids += [ob.enqueue(s, "t", i), ob.enqueue(s, "t", i)]
            until(lambda: len(_ids(redis_url)) == len(ids), timeout=20)
        assert _ids(redis_url) == ids  # (listed in the order workers take them)
    finally:
        relay.stop()
        thread.join(5)


@pytest.mark.real
def test_async_outbox_on_postgres(pg_url: str, redis_url: str) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def produce() -> str:
        engine = create_async_engine(pg_url)
        ob = AsyncOutbox(engine)
        await ob.create_table()
        async with AsyncSession(engine) as s, s.begin():
            id = await ob.enqueue(s, "t", {"a": 1}, queue="q")
        await engine.dispose()
        return id

    id = asyncio.run(produce())
    assert Relay(pg_url, redis_url).relay_once().stored == 1
    assert _info(redis_url, "q", id).payload == {"a": 1}


@pytest.mark.cluster
def test_relay_on_a_cluster_one_multi_per_queue(sqlite_url: str, cluster_url: str) -> None:
    ob = _outbox(sqlite_url)
    queues = ["a", "b", "c", "d"]
    with Session(ob.engine) as s, s.begin():
        ids = {q: [ob.enqueue(s, "t", i, queue=q) for i in range(3)] for q in queues}
    dying = Relay(ob.engine, cluster_url)
    send = dying._send

    def send_then_die(tasks: Any) -> Any:
        send(tasks)
        raise _Died

    dying._send = send_then_die  # type: ignore[method-assign]
    with pytest.raises(_Died):
        dying.relay_once()
    ins = Inspector(cluster_url)
    ins.delete_task("b", ids["b"][0])  # ran and finished meanwhile
    ins.close()
    sent = Relay(ob.engine, cluster_url).relay_once()
    assert (sent.stored, sent.already) == (0, 12) and _count(ob) == 0
    assert {q: sorted(_ids(cluster_url, q)) for q in queues} == {
        q: sorted(v[1:] if q == "b" else v) for q, v in ids.items()}


# -- the command line -------------------------------------------------------------------------------


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, mem_url: str) -> None:
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    ready = _outbox(f"sqlite:///{tmp_path / 'ready.db'}").engine.url.render_as_string()
    runner = CliRunner()
    for args, says in [
        (["--db", "nope://x"], "--db: Can't load plugin"),
        (["--db", empty], "no table 'asynqpy_outbox'"),
        (["--db", "postgresql+psycopg://u@127.0.0.1:1/x"], "cannot reach the database"),
        (["--db", ready, "--batch", "0"], "--batch"),
        (["--db", ready, "--redis-url", "redis://127.0.0.1:1"], "cannot reach Redis"),
    ]:
        if "--redis-url" not in args:
            args = [*args, "--redis-url", mem_url]
        r = runner.invoke(main, ["outbox", "relay", *args])
        assert r.exit_code == 2, r.output
        assert says in r.output, r.output


# -- the docs -----------------------------------------------------------------------------------------


def test_docs_outbox_section_runs_as_written(mem_url: str) -> None:
    """docs/integrations.md's outbox section: its python blocks, in order, on the in-process Redis."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "integrations.md").read_text()
    section = page.split("## The transactional outbox", 1)[1].split("\n## ", 1)[0]
    source = "\n".join(re.findall(r"^```python\n(.*?)^```", section, re.MULTILINE | re.DOTALL))
    assert "outbox.enqueue(session" in source and "relay_once()" in source
    exec(compile(source, "docs/integrations.md (outbox)", "exec", dont_inherit=True), {"URL": mem_url, "__name__": "docs_example"})


@pytest.mark.real
def test_worker_outbox_flag_relays_and_runs(sqlite_url: str, redis_url: str, tmp_path: Path) -> None:
    """``asynqpy worker ... --outbox DB``: the worker relays the outbox itself (and runs the task);
    a bad --outbox is one line, exit 2, before the worker starts."""
    root = Path(__file__).resolve().parent
    sys.path.insert(0, str(root))
    r = CliRunner().invoke(main, ["worker", "workers:mux", "--outbox", "nope://", "--redis-url", redis_url])
    assert r.exit_code == 2 and "--outbox: Can't load plugin" in r.output, r.output
    ob = _outbox(sqlite_url)
    with Session(ob.engine) as s, s.begin():
        id = ob.enqueue(s, "noop", retention=60)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "worker.log", "wb") as log:
        w = subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "worker", "workers:mux", "--redis-url",
                              redis_url, "--outbox", sqlite_url], env=env, stdout=log, stderr=subprocess.STDOUT,
                             cwd=str(root))
    try:
        until(lambda: _state(redis_url, id) is TaskState.COMPLETED, timeout=30)
    finally:
        w.terminate()
        w.wait(20)
    assert _count(ob) == 0


def _state(redis_url: str, id: str) -> TaskState | None:
    try:
        return _info(redis_url, "default", id).state  # type: ignore[no-any-return]
    except (TaskNotFoundError, QueueNotFoundError):
        return None


def test_a_long_lived_relay_registers_a_queue_removed_since_its_last_batch(sqlite_url: str, mem_url: str) -> None:
    """Issue 42 (defect 3): the relay registers each batch's queues (it kept a cache of those it
    had registered: a queue an operator removed meanwhile stayed unknown to the servers that find
    queues by pattern, and to the Inspector, with the task in it pending for good)."""
    ob = _outbox(sqlite_url)
    relay = Relay(ob.engine, mem_url)
    for n in ("first", "again"):
        with Session(ob.engine) as s, s.begin():
            ob.enqueue(s, "email:send", {"n": n}, queue="tenant-r")
        assert relay.relay_once().stored == 1
        with Inspector(mem_url) as insp:
            assert "tenant-r" in insp.queues()
            if n == "first":
                insp.delete_all("tenant-r", "pending")
                insp.remove_queue("tenant-r")
                assert "tenant-r" not in insp.queues()
            else:
                assert insp.queue_info("tenant-r").pending == 1
