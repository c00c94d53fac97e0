"""The writing side of the outbox: :class:`Outbox` (a sync SQLAlchemy engine) and
:class:`AsyncOutbox` (asyncio), written once as plans (:mod:`asynqpy.core.spine.twin`): each public
method is a plan in :class:`_OutboxPlans`; the two classes only run its steps (an insert in the
caller's transaction, or the table's DDL on the engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.model import kinds
from ...core.model import options as opts
from ...core.model.errors import InvalidArgumentError
from ...core.security.signing import SigningKeys, make_signer
from ...core.spine.twin import Async, Steps, Sync, planned
from .table import TABLE, need_sqlalchemy, notify_ddl, outbox_table, upgrade_table

__all__ = ["AsyncOutbox", "Outbox"]



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
    row, written once (:mod:`asynqpy.core.spine.twin`)."""

    def __init__(self, engine: Any, *, table: str = TABLE, schema: str | None = None, metadata: Any = None,
                 max_payload_bytes: int = 1 << 20, signing_key: SigningKeys | None = None, app: Any = None) -> None:
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int) or max_payload_bytes < 1:
            raise InvalidArgumentError(f"max_payload_bytes must be an int >= 1, got {max_payload_bytes!r}")
        from ...app import App

        if app is not None and not isinstance(app, App):
            raise InvalidArgumentError(f"app must be an asynqpy App, got {type(app).__name__}")
        self.engine = engine
        self.table = outbox_table(table, metadata, schema)
        self.max_payload_bytes = max_payload_bytes
        self.app = app
        self.signer = make_signer(signing_key if signing_key is not None or app is None else app.signing_key)
        self._insert = self.table.insert()

    def ddl(self, dialect: str = "postgresql") -> list[str]:
        """The SQL that creates the table, its index and (PostgreSQL) the NOTIFY trigger, for a
        migration: in Alembic, ``for stmt in outbox.ddl(): op.execute(stmt)``."""
        sa = need_sqlalchemy()
        from sqlalchemy.schema import CreateTable

        if dialect not in ("postgresql", "sqlite"):
            raise InvalidArgumentError(f"dialect must be 'postgresql' or 'sqlite', got {dialect!r}")
        d: Any = sa.engine.url.make_url(f"{dialect}://").get_dialect()()
        out = [str(CreateTable(self.table).compile(dialect=d)).strip()]
        out += [str(sa.schema.CreateIndex(i).compile(dialect=d)).strip() for i in self.table.indexes]
        return out + (notify_ddl(self.table) if dialect == "postgresql" else [])

    def row(self, task: Any, *args: Any, **options: Any) -> dict[str, Any]:
        """The outbox row of a task, SIGNED with the outbox's key (``signing_key``, else its App's;
        a task function, or its name, passed without either: the key of the App declaring it):
        the tag a worker checks, over the queue, the id and the encoded task
        (:mod:`asynqpy.core.security.signing`), made here, by the application; the relay only verifies it.
        ``task``: a task function and its arguments, or
        a task type, its payload and the options of :meth:`asynqpy.Client.enqueue` (a name the
        outbox's App declared brings its declared options and argument checks, as a task function
        does: :func:`asynqpy.app.task_call`, the one rule of every producer). The options are
        checked as ``Client.enqueue`` checks them (the same errors), the task encoded, its id
        generated (or ``task_id``). For a connection that is not SQLAlchemy's (Django's): insert
        these columns with its cursor in the transaction (``Outbox(None)`` needs no engine for
        :meth:`row` and :meth:`ddl`)."""
        from ...app import TaskFunction, declared_function, task_call

        task_type, payload, options = task_call(task, args, options, self.app, "outbox.enqueue")
        p = opts.prepare(task_type, payload, max_payload_bytes=self.max_payload_bytes, **options)
        signer = self.signer
        if signer is None and self.app is None:  # a task function (or its name) brings its App's key
            fn = task if isinstance(task, TaskFunction) else declared_function(task_type)
            if fn is not None and fn.app.signing_key is not None:
                signer = make_signer(fn.app.signing_key)
        data = p.data if signer is None else signer.seal(p.queue, p.id, p.data)
        now_ms = p.msg.enqueued_at_ms
        waiting = p.kind is kinds.TaskKind.WAITING  # (no lock: its mode column holds on_parent_failure)
        return {"id": p.id, "queue": p.queue, "kind": p.kind.value, "data": data,
                "due_ms": now_ms + p.delay_ms if p.delay_ms > 0 else 0, "unique_ttl": p.unique_ttl,
                "mode": p.policy if waiting else p.mode, "generated": p.generated_id}

    @planned
    def enqueue(self, /, session: Any, task: Any, *args: Any, **options: Any) -> Steps[str]:
        """Write a task into the outbox in the transaction of ``session`` (a SQLAlchemy ``Session``
        or ``Connection``; :class:`AsyncOutbox`: ``AsyncSession`` or ``AsyncConnection``) and
        return its task id. ``task``: a task function with its arguments (its declared options),
        or a task type with its payload and options (see :meth:`row`). Nothing is sent until the
        transaction commits (a relay sends it then); a rollback leaves nothing. ``options``: those
        of :meth:`asynqpy.Client.enqueue` (checked the same way, the same errors raised here,
        before the row is written), but ``on_conflict``."""
        row = self.row(task, *args, **options)
        yield _Insert(session, self._insert, row)
        return str(row["id"])

    @planned
    def create_table(self) -> Steps[None]:
        """Create the table (if missing) and, on PostgreSQL, its NOTIFY trigger, on the engine; a
        table of an earlier version gets its missing ``error`` column (:func:`upgrade_table`)."""
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
        upgrade_table(conn, self.table)
        if conn.dialect.name == "postgresql":
            sa = need_sqlalchemy()
            for stmt in notify_ddl(self.table):
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
