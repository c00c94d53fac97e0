"""The outbox table (SQLAlchemy): its columns, its upgrade from an earlier version and, on
PostgreSQL, the trigger that NOTIFYs the relay. Shared by the writers (:mod:`.writer`) and the
relay (:mod:`.relay`); the package's docstring tells the whole design."""

from __future__ import annotations

import logging
from typing import Any

from ...core.model.errors import InvalidArgumentError

log = logging.getLogger("asynqpy.outbox")

TABLE = "asynqpy_outbox"
"""The outbox table's default name (also the PostgreSQL NOTIFY channel)."""


class OutboxTableError(InvalidArgumentError):
    """The outbox table lacks a column this version reads (made by an earlier version)."""


def need_sqlalchemy() -> Any:
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
    has no lock: its ``mode`` is its ``on_parent_failure`` code), ``error`` (NULL; a row the relay
    set aside: why, e.g. a bad signature or a malformed column; the relay skips it)."""
    sa = need_sqlalchemy()
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
        sa.Column("error", sa.Text(), nullable=True),
        schema=schema,
    )


def missing_columns(conn: Any, table: Any) -> list[str]:
    """The columns of ``table`` that the database's table lacks (a table made by an earlier
    version: ``error``)."""
    sa = need_sqlalchemy()
    have = {c["name"] for c in sa.inspect(conn).get_columns(table.name, schema=table.schema)}
    return [c.name for c in table.columns if c.name not in have]


def upgrade_table(conn: Any, table: Any) -> None:
    """Add the columns an outbox table of an earlier version lacks (``error TEXT NULL``: its rows
    stay as they are)."""
    sa = need_sqlalchemy()
    for name in missing_columns(conn, table):
        col = table.c[name]
        if not col.nullable:  # pragma: no cover - only nullable columns were ever added
            raise InvalidArgumentError(f"the outbox table {table.fullname} lacks column {name!r}")
        kind = col.type.compile(dialect=conn.dialect)
        conn.execute(sa.text(f"ALTER TABLE {table.fullname} ADD COLUMN {name} {kind}"))
        log.warning("outbox table %s: added the column %s (%s NULL)", table.fullname, name, kind)


def notify_ddl(table: Any) -> list[str]:
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
