"""``asynqpy upgrade`` against Redis: drives the plan of core/spine/migrations.py (the store's
version, its resumable cursor, the steps' batches) with a :class:`SyncExecutor`, on a plain
executor, not a guarded one: the plan reads the store's version itself (a guarded executor would
refuse an older store before it could be migrated)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..core.spine.migrations import DEFAULT_BATCH, REGISTRY, Registry, StepReport, UpgradeReport, upgrade
from ..core.spine.protocol import PROTOCOL_VERSION
from .connection import sync_client
from .executor import SyncExecutor


def run_upgrade(redis: Any, *, registry: Registry = REGISTRY, target: int = PROTOCOL_VERSION,
                count: int = DEFAULT_BATCH, dry_run: bool = False, force: bool = False,
                on_batch: Callable[[StepReport], None] | None = None) -> UpgradeReport:
    """Migrate the store at ``redis`` (a URL or a client) to protocol ``target`` with ``registry``'s
    steps (:func:`asynqpy.core.spine.migrations.upgrade`): idempotent, resumable after a kill (the
    cursor is in Redis), safe while workers of this release run. ``dry_run``: writes nothing and
    counts what would change."""
    client = sync_client(redis)
    try:
        plan = upgrade(registry, int(time.time() * 1000), target=target, count=count, dry_run=dry_run,
                       force=force, on_batch=on_batch)
        return SyncExecutor(client).rounds(plan)
    finally:
        if client is not redis:
            client.close()
