"""The transactional outbox: enqueue a task in the caller's database transaction (SQLAlchemy, sync or
asyncio; PostgreSQL, or SQLite for tests), and a relay that moves committed rows to Redis.

``outbox.enqueue(session, "report:build", payload, **options)`` validates the options as
:meth:`asynqpy.Client.enqueue` does (the same option table, :func:`asynqpy.core.options.prepare`:
a bad option raises the same typed error, before anything is written), generates the task id and
inserts one row holding the encoded task in the caller's transaction: a rollback leaves nothing,
a commit leaves a row the relay sends. The row's id is the task id.

:class:`Relay` sends committed rows in batches, in their insertion order (``seq``): it deletes a
batch (``DELETE ... RETURNING``, the rows chosen with ``FOR UPDATE SKIP LOCKED``, so several relays
never take the same row; by default they also take turns, one batch each, so a producer's commit
order holds: ``ordered``), stores its tasks in Redis by their kind's script
(:func:`asynqpy.core.kinds.store_call`, as the client does) and commits the delete. Exactly once
across a crash at any point: each task's store goes in one ``MULTI`` with a marker key in its
queue's slot (``asynqpy:{Q}:b:o.<id>``, kept ``marker_ttl``); the relay WATCHes the batch's
markers and skips the tasks whose marker exists. A relay killed after Redis stored a batch and
before its delete committed leaves the rows (the transaction rolled back) and the markers: the
next relay finds the markers and only deletes the rows. The markers are deleted once the delete
committed. A task with ``after=`` is registered with its parents first (the parents written
before it in the batch stored before that). On PostgreSQL an ``AFTER INSERT`` trigger NOTIFYs the
relay at commit (it LISTENs: no polling delay); elsewhere the relay polls, backing off while idle.
See docs/integrations.md.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .core import codec, flows, kinds
from .core import options as opts
from .core.broker import Broker, Call
from .core.codec import Message
from .core.errors import AsynqpyError, InvalidArgumentError, RedisUnavailableError
from .core.keys import queue_keys
from .core.signing import SigningKeys, make_signer
from .core.twin import Async, Steps, Sync, planned
from .redisio.connection import REDIS_ERRORS, is_cluster, sync_client
from .redisio.executor import SyncExecutor, evalsha_args, unavailable
from .redisio.scripts import load_scripts

__all__ = ["AsyncOutbox", "Outbox", "Relay", "outbox_table"]

log = logging.getLogger("asynqpy.outbox")

TABLE = "asynqpy_outbox"
"""The outbox table's default name (also the PostgreSQL NOTIFY channel)."""
MARKER_TTL = 7 * 86400
"""Seconds a sent task's marker lives if the relay dies before its row's delete commits: a relay
started within this long after such a crash sends nothing twice."""


STOP_CHECK = 0.2
"""Seconds between two looks at the stop signal while the relay waits for a notification."""


def _sa() -> Any:
    try:
        import sqlalchemy
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ImportError("the outbox needs SQLAlchemy: pip install '.[sqlalchemy]' in asynqpy's repository") from exc
    return sqlalchemy


def outbox_table(name: str = TABLE, metadata: Any = None, schema: str | None = None) -> Any:
    """The outbox's SQLAlchemy ``Table`` in ``metadata`` (a new MetaData if None): add it to your
    models' metadata for Alembic's autogenerate (on PostgreSQL, add the NOTIFY trigger too:
    :meth:`Outbox.ddl`). Columns: ``seq`` (insertion order), ``id`` (the task id), ``queue``,
    ``kind``, ``data`` (the encoded task), ``due_ms`` (a delayed task's due time, Unix ms; 0 = now),
    ``unique_ttl``, ``mode`` and ``generated`` (the store call's arguments; a task with ``after=``
    has no lock: its ``mode`` is its ``on_parent_failure`` code)."""
    sa = _sa()
    md = metadata if metadata is not None else sa.MetaData()
    big = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite's autoincrement needs INTEGER
    return sa.Table(
        name, md,
        sa.Column("seq", big, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(256), nullable=False, unique=True),
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("due_ms", sa.BigInteger(), nullable=False),
        sa.Column("unique_ttl", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(1), nullable=False),
        sa.Column("generated", sa.Boolean(), nullable=False),
        schema=schema,
    )


def _notify_ddl(table: Any) -> list[str]:
    """PostgreSQL: the trigger that NOTIFYs the relay (channel: the table's name) when rows are
    inserted; the notification is delivered at commit, once per transaction."""
    name, full = table.name, table.fullname
    fn = f"{name}_notify"
    return [
        f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM pg_notify('{name}', ''); RETURN NULL; END $$",
        f"DROP TRIGGER IF EXISTS {fn} ON {full}",
        f"CREATE TRIGGER {fn} AFTER INSERT ON {full} FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
    ]


@dataclass(frozen=True)
class _Insert:
    """A step: run ``stmt`` with ``params`` on the caller's session or connection."""

    on: Any
    stmt: Any
    params: dict[str, Any]


@dataclass(frozen=True)
class _Ddl:
    """A step: create (``drop`` False) or drop the table and its trigger on the outbox's engine."""

    drop: bool


class _OutboxPlans:
    """What :class:`Outbox` and :class:`AsyncOutbox` share: the table, the option checks and the
    row, written once (:mod:`asynqpy.core.twin`)."""

    def __init__(self, engine: Any, *, table: str = TABLE, schema: str | None = None, metadata: Any = None,
                 max_payload_bytes: int = 1 << 20) -> None:
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int) or max_payload_bytes < 1:
            raise InvalidArgumentError(f"max_payload_bytes must be an int >= 1, got {max_payload_bytes!r}")
        self.engine = engine
        self.table = outbox_table(table, metadata, schema)
        self.max_payload_bytes = max_payload_bytes
        self._insert = self.table.insert()

    def ddl(self, dialect: str = "postgresql") -> list[str]:
        """The SQL that creates the table, its index and (PostgreSQL) the NOTIFY trigger, for a
        migration: in Alembic, ``for stmt in outbox.ddl(): op.execute(stmt)``."""
        sa = _sa()
        from sqlalchemy.schema import CreateTable

        if dialect not in ("postgresql", "sqlite"):
            raise InvalidArgumentError(f"dialect must be 'postgresql' or 'sqlite', got {dialect!r}")
        d: Any = sa.engine.url.make_url(f"{dialect}://").get_dialect()()
        out = [str(CreateTable(self.table).compile(dialect=d)).strip()]
        out += [str(sa.schema.CreateIndex(i).compile(dialect=d)).strip() for i in self.table.indexes]
        return out + (_notify_ddl(self.table) if dialect == "postgresql" else [])

    def row(self, task_type: str, payload: Any = None, **options: Any) -> dict[str, Any]:
        """The outbox row of a task: the options checked as :meth:`asynqpy.Client.enqueue` checks
        them (the same errors), the task encoded, its id generated (or ``task_id``). For a
        connection that is not SQLAlchemy's (Django's): insert these columns with its cursor in
        the transaction (``Outbox(None)`` needs no engine for :meth:`row` and :meth:`ddl`)."""
        p = opts.prepare(task_type, payload, max_payload_bytes=self.max_payload_bytes, **options)
        now_ms = p.msg.enqueued_at_ms
        waiting = p.kind is kinds.TaskKind.WAITING  # (no lock: its mode column holds on_parent_failure)
        return {"id": p.id, "queue": p.queue, "kind": p.kind.value, "data": p.data,
                "due_ms": now_ms + p.delay_ms if p.delay_ms > 0 else 0, "unique_ttl": p.unique_ttl,
                "mode": p.policy if waiting else p.mode, "generated": p.generated_id}

    @planned
    def enqueue(self, /, session: Any, task_type: str, payload: Any = None, **options: Any) -> Steps[str]:
        """Write task ``task_type`` with ``payload`` into the outbox in the transaction of ``session``
        (a SQLAlchemy ``Session`` or ``Connection``; :class:`AsyncOutbox`: ``AsyncSession`` or
        ``AsyncConnection``) and return its task id. Nothing is sent until the transaction commits
        (a relay sends it then); a rollback leaves nothing. ``options``: those of
        :meth:`asynqpy.Client.enqueue` (checked the same way, the same errors raised here, before
        the row is written), but ``on_conflict``."""
        row = self.row(task_type, payload, **options)
        yield _Insert(session, self._insert, row)
        return str(row["id"])

    @planned
    def create_table(self) -> Steps[None]:
        """Create the table (if missing) and, on PostgreSQL, its NOTIFY trigger, on the engine."""
        yield _Ddl(False)

    @planned
    def drop_table(self) -> Steps[None]:
        """Drop the table (and its trigger)."""
        yield _Ddl(True)

    def _ddl(self, conn: Any, drop: bool) -> None:
        if drop:
            self.table.drop(conn, checkfirst=True)
            return
        self.table.create(conn, checkfirst=True)
        if conn.dialect.name == "postgresql":
            sa = _sa()
            for stmt in _notify_ddl(self.table):
                conn.execute(sa.text(stmt))


class Outbox(_OutboxPlans, Sync):
    """The outbox on a sync SQLAlchemy ``Engine``: :meth:`enqueue` in a ``Session`` or
    ``Connection``'s transaction; :meth:`create_table` or :meth:`ddl` for the table."""

    def _step(self, step: Any) -> Any:
        if type(step) is _Insert:
            return step.on.execute(step.stmt, step.params)
        with self.engine.begin() as conn:
            self._ddl(conn, step.drop)


class AsyncOutbox(_OutboxPlans, Async):
    """The outbox on an asyncio SQLAlchemy ``AsyncEngine``: ``await outbox.enqueue(session, ...)``
    in an ``AsyncSession`` or ``AsyncConnection``'s transaction; ``await outbox.create_table()``."""

    async def _step(self, step: Any) -> Any:
        if type(step) is _Insert:
            return await step.on.execute(step.stmt, step.params)
        async with self.engine.begin() as conn:
            await conn.run_sync(self._ddl, step.drop)


# -- the relay ----------------------------------------------------------------------------------


@dataclass
class _Task:
    """A row read back as what :func:`asynqpy.core.kinds.store_call` stores (``Storable``)."""

    seq: int
    id: str
    queue: str
    kind: kinds.TaskKind
    data: bytes
    delay_ms: int
    unique_ttl: int
    mode: str
    generated_id: bool
    policy: str = "c"  # a task with after=: its on_parent_failure code (the row's mode column)
    _msg: Message | None = None

    @property
    def msg(self) -> Message:
        if self._msg is None:
            self._msg = codec.decode(self.data)
        return self._msg


@dataclass(frozen=True)
class Sent:
    """What one :meth:`Relay.relay_once` did: ``stored`` tasks stored now, ``already`` found
    stored by an earlier relay that died before its delete committed, ``refused`` refused by Redis
    for good (a unique task's duplicate, a throttle, a live task holding a ``task_id``: logged,
    its row deleted, as ``Client.enqueue`` would have raised)."""

    stored: int = 0
    already: int = 0
    refused: int = 0

    @property
    def rows(self) -> int:
        return self.stored + self.already + self.refused


class Relay:
    """Moves committed outbox rows to Redis (see the module's docstring for the guarantees).

    ``db``: a SQLAlchemy URL or sync ``Engine``; ``redis``: a Redis URL or client (a single
    server, Sentinel or a Cluster: one MULTI per queue there). ``batch``: rows per transaction.
    ``poll``: the longest wait between two looks when nothing is notified (PostgreSQL with
    psycopg is woken by NOTIFY; elsewhere the wait starts at ``poll_min`` and doubles while idle).
    ``marker_ttl``: see :data:`MARKER_TTL`. ``signing_key``: as the Client's (tasks are sealed
    when stored). ``ordered`` (PostgreSQL): relays of the table take turns (a transaction-level
    advisory lock per batch), so one producer's tasks reach Redis in its commit order even with
    several relays (the others are standbys); False: they work at once, each on rows the others
    have not locked (``SKIP LOCKED``), and their batches may interleave. (SQLite serializes
    writers: its relays always take turns.)"""

    def __init__(self, db: Any, redis: Any = None, *, table: str = TABLE, schema: str | None = None,
                 batch: int = 500, poll: float = 1.0, poll_min: float = 0.005, marker_ttl: int = MARKER_TTL,
                 signing_key: SigningKeys | None = None, ordered: bool = True) -> None:
        sa = _sa()
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise InvalidArgumentError(f"batch must be an int from 1 to 10000, got {batch!r}")
        for name, v in (("poll", poll), ("poll_min", poll_min)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3600:
                raise InvalidArgumentError(f"{name} must be seconds > 0, got {v!r}")
        if isinstance(marker_ttl, bool) or not isinstance(marker_ttl, int) or marker_ttl < 60:
            raise InvalidArgumentError(f"marker_ttl must be an int >= 60 (seconds), got {marker_ttl!r}")
        self.engine = sa.create_engine(db) if isinstance(db, str) else db
        self.redis = sync_client(redis)
        self.table = outbox_table(table, None, schema)
        self.batch, self.poll, self.poll_min = batch, float(poll), float(poll_min)
        self.marker_ttl_ms = marker_ttl * 1000
        self.broker = Broker(None, make_signer(signing_key))
        self._exec = SyncExecutor(self.redis)
        self._listener: Any = None
        t = self.table
        chosen = sa.select(t.c.seq).order_by(t.c.seq).limit(batch).with_for_update(skip_locked=True)
        self._take = t.delete().where(t.c.seq.in_(chosen.scalar_subquery())).returning(*t.c)
        self.stop_event = threading.Event()
        self.ordered = ordered
        # PostgreSQL: the transaction-level advisory lock ordered relays take turns with
        self._turn = sa.select(sa.func.pg_try_advisory_xact_lock(zlib.crc32(t.fullname.encode()) & 0x7FFFFFFF))

    # -- one batch -----------------------------------------------------------------------------

    def relay_once(self) -> Sent:
        """Send one batch of committed rows (at most ``batch``); what it did. Raises the database's
        or Redis's error (nothing is then deleted: the rows are sent again, at most once)."""
        with self.engine.connect() as conn:
            with conn.begin():
                if self.ordered and conn.dialect.name == "postgresql" and not conn.execute(self._turn).scalar():
                    return Sent()  # another relay's turn: it sends (this one waits, a standby)
                rows = sorted(conn.execute(self._take).all(), key=lambda r: r.seq)
                if not rows:
                    return Sent()
                tasks = [self._task(r) for r in rows]
                sent, markers = self._send(tasks)
            # committed: the rows are gone, their markers may go too
        try:
            self.redis.delete(*markers)
        except REDIS_ERRORS as exc:  # they expire (marker_ttl)
            log.warning("could not delete %d outbox markers (they expire): %s", len(markers), exc)
        return sent

    def _task(self, r: Any) -> _Task:
        delay = max(1, r.due_ms - self.broker.clock.local_ms()) if r.due_ms else 0
        kind = kinds.TaskKind(r.kind)
        if kind is kinds.TaskKind.WAITING:
            return _Task(r.seq, r.id, r.queue, kind, bytes(r.data), delay, r.unique_ttl, "", bool(r.generated),
                         r.mode or "c")
        return _Task(r.seq, r.id, r.queue, kind, bytes(r.data), delay, r.unique_ttl, r.mode, bool(r.generated))

    def _send(self, tasks: Sequence[_Task]) -> tuple[Sent, list[str]]:
        """Store ``tasks`` in Redis, each once (see the module's docstring); the markers set."""
        # the queues' registration, every batch (a queue an operator removed since the last is
        # known again: a cache of the queues registered left it unknown for good; core/client_plans)
        self._exec.run(self.broker.register_queues(sorted({t.queue for t in tasks})))
        markers = [queue_keys(t.queue).batch("o." + t.id) for t in tasks]
        todo: list[tuple[_Task, str, Call[Any] | BaseException]] = []
        replies: list[Any] = []
        try:
            for segment in _segments(tasks):
                for client, idx in self._groups([tasks[i] for i in segment], [markers[i] for i in segment]):
                    calls, got = self._store(client, [tasks[segment[i]] for i in idx],
                                             [markers[segment[i]] for i in idx])
                    todo += calls
                    replies += got
        except REDIS_ERRORS as exc:  # (the groups stored before this one keep their markers)
            raise unavailable(exc) or exc from exc
        stored = refused = 0
        failed: list[tuple[str, BaseException]] = []
        for (t, m, call), reply in zip(todo, replies):
            outcome = _outcome(call, reply)
            if outcome is None:
                stored += 1
            elif isinstance(outcome, AsynqpyError) and not isinstance(outcome, RedisUnavailableError):
                refused += 1
                log.warning("outbox task %s (queue %s) refused by Redis, its row deleted: %s", t.id, t.queue, outcome)
            else:
                failed.append((m, outcome))
        if failed:  # not stored (Redis full, ...): their markers go, the batch is rolled back
            self.redis.delete(*[m for m, _ in failed])
            raise failed[0][1]
        return Sent(stored, len(tasks) - len(todo), refused), markers

    def _groups(self, tasks: Sequence[_Task], markers: Sequence[str]) -> list[tuple[Any, list[int]]]:
        """The batch's tasks by the client that stores them in one MULTI: the whole batch on a
        single server; on a Redis Cluster, one queue at a time (its keys share one slot), on the
        client of the node serving it."""
        if not is_cluster(self.redis):
            return [(self.redis, list(range(len(tasks))))]
        by_queue: dict[str, list[int]] = {}
        for i, t in enumerate(tasks):
            by_queue.setdefault(t.queue, []).append(i)
        rc = self.redis
        return [(rc.get_redis_connection(rc.get_node_from_key(markers[idx[0]])), idx) for idx in by_queue.values()]

    def _store(self, client: Any, tasks: Sequence[_Task],
               markers: Sequence[str]) -> tuple[list[tuple[_Task, str, Call[Any] | BaseException]], list[Any]]:
        """One MULTI on ``client`` under WATCH of the markers: each task not marked yet stored with
        its kind's script and marked. The tasks sent (with their call, or the error that refused
        them before it), and each one's reply (or that error)."""
        scripts = load_scripts()
        with client.pipeline(transaction=True) as pipe:
            pipe.watch(*markers)
            present = pipe.mget(markers)
            todo = [(t, m, self._call(t)) for t, m, p in zip(tasks, markers, present) if p is None]
            sent = [(m, c) for _, m, c in todo if isinstance(c, Call)]
            if not sent:
                return todo, [c for _, _, c in todo]
            pipe.multi()
            for name in sorted({c.script for _, c in sent}):  # loaded within the MULTI: no NOSCRIPT
                pipe.execute_command("SCRIPT", "LOAD", scripts[name].source)
            for m, call in sent:
                pipe.execute_command(*evalsha_args(call))
                pipe.set(m, b"1", px=self.marker_ttl_ms)
            got = iter(pipe.execute(raise_on_error=False)[-2 * len(sent):][0::2])
        return todo, [next(got) if isinstance(c, Call) else c for _, _, c in todo]

    def _call(self, t: _Task) -> Call[Any] | BaseException:
        """The call storing ``t`` by its kind; a task with ``after=`` is first registered with its
        parents (each in its own slot, as ``Client.enqueue`` does), and a refusal there (a parent
        missing) is returned. Redis unreachable raises."""
        if t.kind is not kinds.TaskKind.WAITING:
            return kinds.store_call(self.broker, t)
        p = opts.Prepared(t.queue, t.id, list(t.msg.__dict__.values()), t.delay_ms, 0, t.data, t.generated_id, t.msg,
                          "", t.kind)
        p.policy = t.policy
        plan = flows.enqueue_after(self.broker, p)
        try:
            registers = next(plan)
            final = plan.send(self._exec.run_many(registers))
        except RedisUnavailableError:
            raise
        except AsynqpyError as exc:
            return exc
        finally:
            plan.close()
        call: Call[Any] = final[0]
        return call

    # -- the loop ------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> None:
        """Relay until ``stop`` (or :attr:`stop_event`) is set: batch after batch while rows
        are there, then wait for a notification (PostgreSQL) or the next poll. Database and Redis
        outages are logged and waited out (backing off to ``poll``)."""
        stop = stop or self.stop_event
        idle = self.poll_min
        retried: tuple[type[BaseException], ...] = (AsynqpyError, *REDIS_ERRORS, *_db_errors())
        while not stop.is_set():
            try:
                listening = self._listen() is not None  # LISTEN before the look: no commit is missed
                sent = self.relay_once()
            except retried as exc:
                log.warning("outbox relay: %s (trying again in %.2fs)", _short(exc), idle)
                self._close_listener()
                stop.wait(idle)
                idle = min(self.poll, idle * 2)
                continue
            if sent.rows >= self.batch:
                idle = self.poll_min
                continue
            if sent.rows:
                idle = self.poll_min
                continue  # one more look: rows committed meanwhile were not notified to a waiter
            if self._wait(self.poll if listening else min(self.poll, idle)):
                idle = self.poll_min
            else:
                idle = min(self.poll, idle * 2)
        self._close_listener()

    def _listen(self) -> Any:
        """The LISTENing psycopg connection (PostgreSQL with psycopg 3), opened on first use; None
        elsewhere (the relay polls)."""
        if self._listener is not None or self.engine.dialect.name != "postgresql":
            return self._listener
        if self.engine.dialect.driver != "psycopg":
            return None
        import psycopg

        url = self.engine.url.set(drivername="postgresql")
        conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
        conn.execute(f'LISTEN "{self.table.name}"')
        self._listener = conn
        return conn

    def _wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a notification (or just sleep when polling); True if one came."""
        conn = self._listener
        if conn is None:
            self.stop_event.wait(timeout)
            return False
        deadline = time.monotonic() + timeout
        try:
            while not self.stop_event.is_set():  # in slices: stop() is seen within STOP_CHECK
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                for _ in conn.notifies(timeout=min(left, STOP_CHECK), stop_after=1):
                    return True
            return False
        except Exception as exc:  # noqa: BLE001 - the listener broke (a restart): polled until it is back
            log.warning("outbox relay: the LISTEN connection broke: %s", _short(exc))
            self._close_listener()
            return True

    def _close_listener(self) -> None:
        if self._listener is not None:
            try:
                self._listener.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self._listener = None

    def start(self) -> threading.Thread:
        """Run the relay in a daemon thread (a worker's ``--outbox``); :meth:`stop` ends it."""
        thread = threading.Thread(target=self.run, name="asynqpy-outbox-relay", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stop_event.set()

    def pending(self) -> int:
        """How many rows wait to be sent (committed, not yet relayed)."""
        sa = _sa()
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(self.table)).scalar_one())


def _segments(tasks: Sequence[_Task]) -> list[list[int]]:
    """The batch in order, cut around each task with ``after=``: its parents (maybe in the same
    batch, earlier) are stored before it registers with them."""
    out: list[list[int]] = [[]]
    for i, t in enumerate(tasks):
        if t.kind is kinds.TaskKind.WAITING:
            out += [[i], []]
        else:
            out[-1].append(i)
    return [seg for seg in out if seg]


def _outcome(call: Call[Any] | BaseException, reply: Any) -> BaseException | None:
    """None if the store call succeeded, else the error its reply means."""
    if isinstance(call, BaseException):
        return call
    if isinstance(reply, BaseException):
        return unavailable(reply) or reply
    try:
        call.parse(reply)
    except Exception as exc:  # noqa: BLE001 - a typed refusal (DuplicateTaskError, ...)
        return exc
    return None


def _short(exc: BaseException) -> str:
    """An error's first line (a database error's own, without SQLAlchemy's statement dump)."""
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def _db_errors() -> tuple[type[BaseException], ...]:
    sa = _sa()
    errors: tuple[type[BaseException], ...] = (sa.exc.DBAPIError, sa.exc.InterfaceError, OSError)
    try:
        import psycopg
    except ImportError:
        return errors
    return (*errors, psycopg.Error)  # (the LISTEN connection is psycopg's own)

