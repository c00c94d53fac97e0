"""The transactional outbox on Django's database connection (docs/integrations-frameworks.md).

    from asynqpy.contrib.django.outbox import DjangoOutbox

    outbox = DjangoOutbox()                       # settings.DATABASES["default"]

    with transaction.atomic():
        order = Order.objects.create(...)
        outbox.enqueue(send_receipt, order.id)    # a row in this transaction: sent once it commits

The row is the one :class:`asynqpy.contrib.outbox.Outbox` writes (its ``row``: the options checked as
``Client.enqueue`` checks them, the task encoded, its id chosen), inserted with Django's cursor in
the caller's transaction: a rollback leaves nothing; a commit leaves a row that the relay
(``asynqpy outbox relay --db URL``, or ``manage.py asynqpy_worker --outbox URL``, with the SQLAlchemy
URL of the same database) sends to Redis exactly once. Unlike :func:`~asynqpy.contrib.django.enqueue_on_commit`,
nothing is lost if the process dies after the commit. Needs the ``sqlalchemy`` extra (the row and
the relay are SQLAlchemy's) and a driver for the relay (``postgres``: psycopg).
"""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import quote

from django.db import connections

from ...app import App, TaskFunction
from ...core.model.errors import InvalidArgumentError

__all__ = ["DjangoOutbox", "sqlalchemy_url"]


def sqlalchemy_url(using: str = "default") -> str:
    """The SQLAlchemy URL of a database of ``settings.DATABASES`` (PostgreSQL with psycopg 3, or
    SQLite), for the relay: ``asynqpy outbox relay --db URL`` or ``asynqpy_worker --outbox URL``."""
    conn = connections[using]
    db = conn.settings_dict
    if conn.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    if conn.vendor != "postgresql":
        raise InvalidArgumentError(f"the outbox runs on PostgreSQL or SQLite, not {conn.vendor}")
    user = quote(db.get("USER") or "", safe="")
    password = quote(db.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql+psycopg://{auth}{host}{port}/{quote(db['NAME'], safe='')}"


class DjangoOutbox:
    """The outbox in database ``using`` (an alias of ``settings.DATABASES``). ``table``,
    ``schema`` and ``max_payload_bytes``: as for :class:`asynqpy.contrib.outbox.Outbox` (the relay must be
    given the same table). Rows are signed as :class:`asynqpy.contrib.outbox.Outbox` signs them, with
    ``signing_key``, else the key of ``app``, else of the project's App (the one the settings name
    or the one made), else ``settings.ASYNQPY["signing_key"]``; a task type enqueued by name
    brings the options its task function declared in that App (:func:`asynqpy.app.task_call`).
    The App is looked up at the first enqueue (it may be made after the outbox)."""

    def __init__(self, using: str = "default", *, app: App | None = None, signing_key: Any = None,
                 **outbox_options: Any) -> None:
        self._outbox_module = importlib.import_module("asynqpy.contrib.outbox")
        self.using = using
        self._app, self._signing_key, self._outbox_options = app, signing_key, outbox_options
        self._ddl: Any = self._outbox_module.Outbox(None, **outbox_options)  # its ddl() and table; no engine
        self._table = self._ddl.table
        self._writer: Any = None

    def _rows(self) -> Any:
        """The Outbox whose row() this one inserts (its App and key found on first use)."""
        if self._writer is None:
            from . import conf, declaring_app

            app = self._app if self._app is not None else declaring_app()
            key = self._signing_key
            if key is None:
                key = app.signing_key if app is not None else conf().get("signing_key")
            self._writer = self._outbox_module.Outbox(None, app=app, signing_key=key, **self._outbox_options)
        return self._writer

    def _insert_sql(self, columns: list[str]) -> str:
        qn = connections[self.using].ops.quote_name
        name = ".".join(qn(p) for p in ([self._table.schema] if self._table.schema else []) + [self._table.name])
        return f"INSERT INTO {name} ({', '.join(qn(c) for c in columns)}) VALUES ({', '.join(['%s'] * len(columns))})"

    def enqueue(self, task: TaskFunction[Any, Any] | str, *args: Any, **kwargs: Any) -> str:
        """Write a task into the outbox in the current transaction of the database; its task id.
        ``task``: a task function with its arguments (its options, as it would enqueue), or a task
        type with its payload and the options of ``Client.enqueue`` (but ``after`` and
        ``on_conflict``). The options are checked here, before anything is written."""
        row = self._rows().row(task, *args, **kwargs)
        columns = list(row)
        with connections[self.using].cursor() as cursor:
            cursor.execute(self._insert_sql(columns), [row[c] for c in columns])
        return str(row["id"])

    def ddl(self) -> list[str]:
        """The SQL that creates the table (and on PostgreSQL its NOTIFY trigger) for this
        database: for a migration, ``migrations.RunSQL(DjangoOutbox().ddl())``."""
        vendor = connections[self.using].vendor
        if vendor not in ("postgresql", "sqlite"):
            raise InvalidArgumentError(f"the outbox runs on PostgreSQL or SQLite, not {vendor}")
        return list(self._ddl.ddl(vendor))

    def create_table(self) -> None:
        """Create the table (and its trigger) unless it exists."""
        conn = connections[self.using]
        if self._table.name in conn.introspection.table_names():
            return
        with conn.cursor() as cursor:
            for stmt in self.ddl():
                cursor.execute(stmt)
