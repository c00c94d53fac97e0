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
from asynqpy.core.model.errors import InvalidArgumentError, PayloadError, QueueNotFoundError, TaskNotFoundError
from asynqpy.core.model.task import TaskState
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


# -- signing, bad rows, outages (issue 42) -------------------------------------------------------------

K_NEW, K_OLD = b"n" * 32, b"o" * 32


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.real)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The outbox's database: a SQLite file, and PostgreSQL (tests/pgserver.py)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'app.db'}"
    return str(request.getfixturevalue("pg_url"))


def _insert(ob: Outbox, row: dict[str, Any]) -> None:
    """A row written by plain SQL, by any database writer (no asynqpy producer involved)."""
    cols = [c for c in row if c != "error"]
    with ob.engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {ob.table.name} ({', '.join(cols)}) VALUES "
                             f"({', '.join(':' + c for c in cols)})"), {c: row[c] for c in cols})


def _stored(redis_url: str, queue: str, id: str) -> bytes | None:
    import redis

    from asynqpy.core.spine.keys import queue_keys
    from asynqpy.core.spine.stored import message_of

    r = redis.Redis.from_url(redis_url)
    try:
        value = r.hget(queue_keys(queue).tasks, id)
    finally:
        r.close()
    return None if value is None else message_of(value)


@pytest.mark.real
def test_rows_are_signed_by_the_application_and_the_relay_never_signs(db_url: str, redis_url: str) -> None:
    """The relay is no signing oracle: the application signs each row when it writes it (its key;
    key rotation as the Signer's: the first key signs, every key verifies); the relay verifies
    through the trust gate, stores the row's bytes as written, and sets aside a row that is
    unsigned (a plain SQL INSERT), signed with another key, or moved to another queue."""
    from asynqpy import ServeMux
    from asynqpy.core.security.signing import Signer
    from asynqpy.testing import drain

    ob_old = Outbox(sa.create_engine(db_url), signing_key=K_OLD)  # a producer not rotated yet
    ob_old.create_table()
    ob_new = Outbox(ob_old.engine, signing_key=[K_NEW, K_OLD])
    with Session(ob_old.engine) as s, s.begin():
        old = ob_old.enqueue(s, "payout:send", {"to": "a"}, queue="billing")
        new = ob_new.enqueue(s, "payout:send", {"to": "b"}, queue="billing")
    _insert(ob_old, Outbox(None).row("payout:send", {"to": "attacker"}, queue="billing", task_id="unsigned"))
    _insert(ob_old, Outbox(None, signing_key=b"x" * 32).row("payout:send", {"to": "attacker"}, queue="billing",
                                                             task_id="other-key"))
    moved = ob_new.row("payout:send", {"to": "c"}, queue="audit", task_id="moved")
    _insert(ob_old, {**moved, "queue": "billing"})  # a signed row moved to another queue
    relay = Relay(ob_old.engine, redis_url, signing_key=[K_NEW, K_OLD])
    sent = relay.relay_once()
    assert (sent.stored, sent.set_aside) == (2, 3), sent
    assert Signer(K_OLD).open("billing", old, _stored(redis_url, "billing", old) or b"")  # as written: not re-signed
    assert Signer(K_NEW).open("billing", new, _stored(redis_url, "billing", new) or b"")
    for id in ("unsigned", "other-key", "moved"):
        assert _stored(redis_url, "billing", id) is None
    aside = {r.id: r.error for r in relay.set_aside()}
    assert aside == {"unsigned": "bad signature: the message is not signed",
                     "other-key": "bad signature: the tag matches none of the signing keys",
                     "moved": "bad signature: the tag matches none of the signing keys"}
    assert relay.pending() == 0 and relay.relay_once().rows == 0  # set aside: not taken again
    ran: list[Any] = []
    mux = ServeMux()
    mux.handle("payout:send")(lambda task: ran.append(task.payload["to"]))
    drain(mux, redis_url, queues=["billing"], signing_key=[K_NEW, K_OLD], timeout=20)
    assert sorted(ran) == ["a", "b"]  # the rows the application signed, and none of the others
    relay.engine.dispose()
    ob_old.engine.dispose()


@pytest.mark.real
def test_a_keyless_relay_stores_the_rows_as_written(db_url: str, redis_url: str) -> None:
    """Without a key the relay sends the bytes as written: a signed row runs on a keyed worker, an
    unsigned one is refused there (it signs nothing)."""
    from asynqpy import ServeMux
    from asynqpy.testing import drain

    ob = Outbox(sa.create_engine(db_url), signing_key=K_NEW)
    ob.create_table()
    with Session(ob.engine) as s, s.begin():
        ob.enqueue(s, "t", "signed", retention=60)
    _insert(ob, Outbox(None).row("t", "forged", retention=60, task_id="forged"))
    relay = Relay(ob.engine, redis_url)
    assert relay.relay_once().stored == 2
    ran: list[Any] = []
    mux = ServeMux()
    mux.handle("t")(lambda task: ran.append(task.payload))
    drain(mux, redis_url, queues=["default"], signing_key=K_NEW, timeout=20, raise_on_failure=False)
    assert ran == ["signed"]
    info = _info(redis_url, "default", "forged")
    assert info.state is TaskState.ARCHIVED and "not signed" in info.last_error
    relay.engine.dispose()
    ob.engine.dispose()


@pytest.mark.real
def test_a_bad_row_is_set_aside_and_the_rows_behind_it_relayed(db_url: str, redis_url: str) -> None:
    """A malformed row (an unknown kind, a bad queue name, undecodable data, a negative column) is
    set aside with its error and the good rows behind it are relayed; the relay keeps running.
    ``asynqpy outbox failed`` lists them, ``retry`` lets the relay try again, ``discard`` deletes."""
    ob = _outbox(db_url)
    base = Outbox(None).row("order:confirm", {"order": 0}, queue="orders")
    bad = {"kind": {"kind": "plain2"}, "queue": {"queue": "bad queue"}, "data": {"data": b"\xc1garbage"},
           "ttl": {"unique_ttl": -5}, "mode": {"mode": "z"}}
    for name, poison in bad.items():
        _insert(ob, {**base, "id": f"bad-{name}", **poison})
    with Session(ob.engine) as s, s.begin():
        good = [ob.enqueue(s, "order:confirm", {"order": i}, queue="orders") for i in range(3)]
    relay = Relay(ob.engine, redis_url, poll=0.05)
    thread = relay.start()
    try:
        until(lambda: all(_stored(redis_url, "orders", id) is not None for id in good), timeout=20)
        until(lambda: len(relay.set_aside()) == 5, timeout=20)
        assert thread.is_alive()
    finally:
        relay.stop()
        thread.join(10)
    errors = {r.id: r.error for r in relay.set_aside()}
    assert errors["bad-kind"] == "unknown kind 'plain2'"
    assert errors["bad-queue"].startswith("invalid queue name 'bad queue'")
    assert "undecodable" in errors["bad-data"] or "malformed" in errors["bad-data"].lower(), errors
    assert errors["bad-ttl"] == "unique_ttl must be an int >= 0, got -5"
    assert errors["bad-mode"].startswith("mode must be one of")
    assert relay.pending() == 0
    runner = CliRunner()
    r = runner.invoke(main, ["outbox", "failed", "--db", db_url])
    assert r.exit_code == 0 and r.output.count("bad-") == 5 and "unknown kind 'plain2'" in r.output, r.output
    r = runner.invoke(main, ["outbox", "retry", "--db", db_url, "bad-kind"])
    assert r.exit_code == 0 and "1 row(s)" in r.output and relay.pending() == 1
    assert relay.relay_once().set_aside == 1  # still bad: set aside again
    r = runner.invoke(main, ["outbox", "retry", "--db", db_url])
    assert r.exit_code == 2 and "give task ids or --all" in r.output
    r = runner.invoke(main, ["outbox", "discard", "--db", db_url, "--all"])
    assert r.exit_code == 0 and "5 row(s) deleted" in r.output and _count(ob) == 0
    relay.engine.dispose()
    ob.engine.dispose()


def test_an_outage_is_logged_once_and_its_end_once(sqlite_url: str, mem_url: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """While Redis (or the database) is down the relay logs one line, and one when it relays
    again; an unexpected error does not end it (logged with its traceback, retried)."""
    import logging

    from asynqpy.core.model.errors import RedisUnavailableError
    from asynqpy.outbox import Sent

    _outbox(sqlite_url)
    relay = Relay(sqlite_url, mem_url, poll=0.02, poll_min=0.001)
    script: list[BaseException | None] = [RedisUnavailableError("Redis is unreachable: refused")] * 8 + [None] * 3
    script += [KeyError("a bug"), None]

    def once() -> Sent:
        if not script:
            relay.stop()
            return Sent()
        step = script.pop(0)
        if step is not None:
            raise step
        return Sent()

    relay.relay_once = once  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG, logger="asynqpy.outbox"):
        thread = relay.start()
        thread.join(20)
    assert not thread.is_alive()
    lines = [r.getMessage() for r in caplog.records if r.name == "asynqpy.outbox" and r.levelno >= logging.WARNING]
    assert len(lines) == 4, lines  # down, back; the bug, back
    assert "cannot relay: Redis is unreachable" in lines[0] and "relaying again" in lines[1]
    assert "8 failed look(s)" in lines[1]
    assert "KeyError" in lines[2] or "a bug" in lines[2]
    relay.engine.dispose()


def test_an_outbox_table_of_an_earlier_version_is_named_and_upgraded(sqlite_url: str, mem_url: str) -> None:
    """A table made before the ``error`` column: the relay refuses it with what to run (the CLI:
    one line, exit 2); ``outbox create-table`` (``Outbox.create_table()``) adds the column and the
    rows already there are sent."""
    from asynqpy.outbox import OutboxTableError

    engine = sa.create_engine(sqlite_url)
    old = Outbox(engine)
    columns = [sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable, unique=c.unique,
                         autoincrement=c.autoincrement) for c in old.table.columns if c.name != "error"]
    sa.Table(old.table.name, sa.MetaData(), *columns).create(engine)
    row = old.row("t", 1)
    _insert(old, row)
    with pytest.raises(OutboxTableError, match="ALTER TABLE asynqpy_outbox ADD COLUMN error TEXT"):
        Relay(engine, mem_url).relay_once()
    r = CliRunner().invoke(main, ["outbox", "relay", "--db", sqlite_url, "--redis-url", mem_url])
    assert r.exit_code == 2 and "lacks the column(s) error" in r.output, r.output
    r = CliRunner().invoke(main, ["outbox", "create-table", "--db", sqlite_url])
    assert r.exit_code == 0, r.output
    assert Relay(engine, mem_url).relay_once().stored == 1 and _ids(mem_url) == [row["id"]]
    engine.dispose()


def test_the_database_password_comes_from_a_file_or_the_environment(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """--db/--outbox need no password on the command line (``ps`` shows it, and a worker passes its
    command line to each child): --db-password-file or $ASYNQPY_DB_PASSWORD fill it in."""
    from asynqpy.cli.common import UserError
    from asynqpy.cli.outbox import engine_of

    url = "postgresql+psycopg://app@db.example:5432/shop"
    monkeypatch.delenv("ASYNQPY_DB_PASSWORD", raising=False)
    assert engine_of(url).url.password is None
    secret = tmp_path / "pw"
    secret.write_text("s3cret:/@\n")
    assert engine_of(url, password_file=str(secret)).url.password == "s3cret:/@"
    monkeypatch.setenv("ASYNQPY_DB_PASSWORD", "from-env")
    assert engine_of(url).url.password == "from-env"
    with pytest.raises(UserError, match="give it once"):
        engine_of("postgresql+psycopg://app:pw@db.example/shop")
    (tmp_path / "empty").write_text("")
    for bad in (str(tmp_path / "empty"), str(tmp_path / "missing")):
        with pytest.raises(UserError, match="--db-password-file"):
            engine_of(url, password_file=bad)
    r = CliRunner().invoke(main, ["outbox", "failed", "--db", "sqlite:///" + str(tmp_path / "x.db"),
                                  "--db-password-file", str(tmp_path / "missing")])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    from asynqpy.cli.main import _child_argv

    child = _child_argv(["worker", "t:app", "--processes", "2", "--outbox", "postgresql+psycopg://a:pw@h/d",
                         "--db-password-file=/run/pw", "-c", "4"])
    assert child[3:] == ["worker", "t:app", "-c", "4", "--supervised"]  # the supervisor alone relays


# -- one rule for every producer (issue 42: 22) --------------------------------------------------------


_APP_MODULE = '''
from asynqpy import App
app = App({url!r}, default_queue="orders", signing_key=b"k" * 32)

@app.task(name="confirm", retention=60)
def confirm(order: int) -> int:
    return order
'''


@pytest.mark.real
def test_a_name_or_a_task_function_brings_its_declared_options(db_url: str, redis_url: str) -> None:
    """A task declared ``@app.task(queue=, max_retry=, retention=)`` and written through the outbox
    by its name or as the function: its declared options and argument checks (given options
    win), signed with its App's key; the same through AsyncOutbox and a process's one App."""
    from asynqpy import App

    app = App(redis_url, default_queue="default", signing_key=K_NEW)
    name = f"charge-{next(_names)}"

    @app.task(name=name, queue="billing", max_retry=3, retention=600)
    def charge(amount: int, note: str = "") -> int:
        return amount

    ob = _outbox(db_url)
    with_app = Outbox(ob.engine, app=app)
    with Session(ob.engine) as s, s.begin():
        by_name = with_app.enqueue(s, name, {"amount": 5})
        by_function = ob.enqueue(s, charge, 6, note="x")  # no app given: the function brings its own
        process_wide = ob.enqueue(s, name, {"amount": 7})  # a name only this process's App declares
        overridden = with_app.enqueue(s, name, {"amount": 8}, max_retry=1)
        for payload in ({"amount": "five"}, {"amount": 1, "nope": 2}, [1], {}):
            with pytest.raises(InvalidArgumentError):
                with_app.enqueue(s, name, payload)
    sent = Relay(ob.engine, redis_url, signing_key=K_NEW).relay_once()
    assert (sent.stored, sent.set_aside) == (4, 0), sent
    for id in (by_name, by_function, process_wide):
        info = _info(redis_url, "billing", id)
        assert (info.max_retry, info.retention.total_seconds() if hasattr(info.retention, "total_seconds")
                else info.retention) in ((3, 600), (3, 600.0)), info
    assert _info(redis_url, "billing", overridden).max_retry == 1
    assert _info(redis_url, "billing", by_function).payload == {"amount": 6, "note": "x"}
    ob.engine.dispose()


@pytest.mark.real
def test_worker_outbox_relays_with_the_apps_key(tmp_path: Path, redis_url: str) -> None:
    """``asynqpy worker MODULE:APP --outbox DB``: the relay has the App's key (no
    --signing-key-file): a row the application signed runs; an unsigned one is set aside, never
    stored (a keyless relay would store it, for the worker to archive)."""
    (tmp_path / "signed_tasks.py").write_text(_APP_MODULE.format(url=redis_url))
    db = f"sqlite:///{tmp_path / 'app.db'}"
    ob = Outbox(sa.create_engine(db), signing_key=b"k" * 32)
    ob.create_table()
    with Session(ob.engine) as s, s.begin():
        id = ob.enqueue(s, "confirm", {"order": 7}, queue="orders", retention=60)
    _insert(ob, Outbox(None).row("confirm", {"order": 8}, queue="orders", task_id="unsigned"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "worker.log", "wb") as log:
        w = subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "worker", "signed_tasks:app", "--outbox", db,
                              "--shutdown-timeout", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                             cwd=str(tmp_path))
    relay = Relay(ob.engine, redis_url)
    try:
        until(lambda: _state_in(redis_url, "orders", id) is TaskState.COMPLETED, timeout=30)
        until(lambda: [r.id for r in relay.set_aside()] == ["unsigned"], timeout=30)
    finally:
        w.terminate()
        w.wait(20)
    assert _info(redis_url, "orders", id).result == 7
    assert _stored(redis_url, "orders", "unsigned") is None
    assert "not signed" in relay.set_aside()[0].error
    ob.engine.dispose()


def _state_in(redis_url: str, queue: str, id: str) -> TaskState | None:
    try:
        return _info(redis_url, queue, id).state  # type: ignore[no-any-return]
    except (TaskNotFoundError, QueueNotFoundError):
        return None


def test_async_outbox_brings_declared_options_and_signs(tmp_path: Path, mem_url: str) -> None:
    """AsyncOutbox: the same rule (a task function or its App's name) and the same signing."""
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    from asynqpy import App
    from asynqpy.core.security.signing import Signer

    app = App(mem_url, signing_key=K_NEW)
    name = f"ship-{next(_names)}"

    @app.task(name=name, queue="shipping", max_retry=2, retention=30)
    def ship(parcel: str) -> str:
        return parcel

    async def produce() -> list[str]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
        ob = AsyncOutbox(engine, app=app)
        await ob.create_table()
        async with AsyncSession(engine) as s, s.begin():
            ids = [await ob.enqueue(s, name, {"parcel": "p1"}), await ob.enqueue(s, ship, "p2")]
            with pytest.raises(InvalidArgumentError):
                await ob.enqueue(s, name, {"parcel": 3})
        await engine.dispose()
        return ids

    ids = asyncio.run(produce())
    relay = Relay(f"sqlite:///{tmp_path / 'a.db'}", mem_url, signing_key=K_NEW)
    assert relay.relay_once().stored == 2
    for id in ids:
        info = _info(mem_url, "shipping", id)
        assert (info.max_retry, info.retention) == (2, 30)
    from asynqpy.core.spine.keys import queue_keys
    from asynqpy.core.spine.stored import message_of

    stored = relay.redis.hget(queue_keys("shipping").tasks, ids[0])
    assert Signer(K_NEW).open("shipping", ids[0], message_of(stored))
    relay.engine.dispose()


def test_outbox_relay_exits_1_when_the_relay_stops_on_an_error(sqlite_url: str, mem_url: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``asynqpy outbox relay`` never exits 0 on a crash (a supervisor's Restart=on-failure)."""
    from asynqpy.outbox import OutboxTableError

    _outbox(sqlite_url)

    def broken(self: Relay) -> Any:
        raise OutboxTableError("the outbox table asynqpy_outbox lacks the column(s) error")

    monkeypatch.setattr(Relay, "relay_once", broken)
    r = CliRunner().invoke(main, ["outbox", "relay", "--db", sqlite_url, "--redis-url", mem_url])
    assert r.exit_code == 1 and "the outbox relay stopped: the outbox table" in r.output, r.output


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
