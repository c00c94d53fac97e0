"""The transactional outbox: enqueue a task in the caller's database transaction (SQLAlchemy, sync or
asyncio; PostgreSQL, or SQLite for tests), and a relay that moves committed rows to Redis.

``outbox.enqueue(session, "report:build", payload, **options)`` validates the options as
:meth:`asynqpy.Client.enqueue` does (the same option table, :func:`asynqpy.core.model.options.prepare`:
a bad option raises the same typed error, before anything is written), generates the task id and
inserts one row holding the encoded task in the caller's transaction: a rollback leaves nothing,
a commit leaves a row the relay sends. The row's id is the task id.

:class:`Relay` sends committed rows in batches, in their insertion order (``seq``): it deletes a
batch (``DELETE ... RETURNING``, the rows chosen with ``FOR UPDATE SKIP LOCKED``, so several relays
never take the same row; by default they also take turns, one batch each, so a producer's commit
order holds: ``ordered``), stores its tasks in Redis by their kind's script
(:func:`asynqpy.core.model.kinds.store_call`, as the client does) and commits the delete. Exactly once
across a crash at any point: each task's store goes in one ``MULTI`` with a marker key in its
queue's slot (``asynqpy:{Q}:b:o.<id>``, kept ``marker_ttl``); the relay WATCHes the batch's
markers and skips the tasks whose marker exists. A relay killed after Redis stored a batch and
before its delete committed leaves the rows (the transaction rolled back) and the markers: the
next relay finds the markers and only deletes the rows. The markers are deleted once the delete
committed. A task with ``after=`` is registered with its parents first (the parents written
before it in the batch stored before that). On PostgreSQL an ``AFTER INSERT`` trigger NOTIFYs the
relay at commit (it LISTENs: no polling delay); elsewhere the relay polls, backing off while idle.
See docs/integrations.md.

The package (the ``sqlalchemy`` extra), by concern: :mod:`.table` (the table, its upgrade, the
NOTIFY trigger), :mod:`.writer` (:class:`Outbox` and :class:`AsyncOutbox`, written once as
plans), :mod:`.rows` (a row read back and checked, what a batch did), :mod:`.relay`
(:class:`Relay`). ``asynqpy.outbox`` re-exports these names, the documented import.
"""
from __future__ import annotations

from .relay import MARKER_TTL, Relay
from .rows import BadRow, Sent, SetAside
from .table import TABLE, OutboxTableError, missing_columns, outbox_table, upgrade_table
from .writer import AsyncOutbox, Outbox

__all__ = ["MARKER_TTL", "TABLE", "AsyncOutbox", "BadRow", "Outbox", "OutboxTableError", "Relay", "SetAside", "Sent",
           "missing_columns", "outbox_table", "upgrade_table"]
