"""The documented import of the transactional outbox, a thin re-export: the outbox lives in
:mod:`asynqpy.contrib.outbox` beside the other integrations (the ``sqlalchemy`` extra), and
``from asynqpy.outbox import Outbox, AsyncOutbox, Relay`` keeps working. Nothing is defined here.
"""

from __future__ import annotations

from .contrib.outbox import (
    MARKER_TTL,
    TABLE,
    AsyncOutbox,
    BadRow,
    Outbox,
    OutboxTableError,
    Relay,
    Sent,
    SetAside,
    missing_columns,
    outbox_table,
    upgrade_table,
)

__all__ = ["MARKER_TTL", "TABLE", "AsyncOutbox", "BadRow", "Outbox", "OutboxTableError", "Relay", "SetAside", "Sent",
           "missing_columns", "outbox_table", "upgrade_table"]
