"""``asynqpy keys rotate`` and ``asynqpy tenant forget``: encryption's operator commands
(docs/encryption.md)."""

from __future__ import annotations

from dataclasses import asdict

import click

from asynqpy.core.model.options import validate_tenant
from asynqpy.core.spine.keys import validate_queue

from .common import (
    SafePath,
    UserError,
    ask,
    echo,
    emit_json,
    encryption_keys_option,
    encryption_ring,
    inspector,
    json_option,
    redis_url_option,
    signing_key_option,
    signing_keys,
    user_errors,
)


@click.group()
def keys() -> None:
    """Encryption keys: re-encrypt what older keys sealed (docs/encryption.md)."""


@keys.command()
@click.option("--restart", is_flag=True, help="Start from the first queue, not from where the last run stopped.")
@click.option("--max-pages", type=click.IntRange(1, None), default=None,
              help="Stop after this many pages of tasks (run the command again to go on).")
@click.option("--offload-dir", type=SafePath(file_okay=False), envvar="ASYNQPY_OFFLOAD_DIR", default=None,
              help="Directory of offloaded payloads (the workers' FileBlobStore): their blobs are re-encrypted "
                   "too, each into a new blob (docs/offload.md).")
@json_option
@encryption_keys_option
@signing_key_option
@redis_url_option
@user_errors
def rotate(restart: bool, max_pages: int | None, offload_dir: str | None, as_json: bool,
           encryption_keys_file: str | None, signing_key_file: str | None, redis_url: str) -> None:
    """Re-encrypt every queue's tasks (payloads, results, logs) and tenant keys sealed with an older
    key with the newest key of the ring; with --offload-dir, offloaded payloads too. Safe while
    workers run; resumable (its cursor is kept in Redis). Give workers and clients the new ring
    (the new key last) first."""
    ring = encryption_ring(encryption_keys_file)
    if ring is None:
        raise UserError("keys rotate needs the keys: --encryption-keys FILE or $ASYNQPY_ENCRYPTION_KEYS")
    store = None
    if offload_dir:
        from asynqpy.worker.blobs import FileBlobStore

        store = FileBlobStore(offload_dir)
    with inspector(redis_url, signing_keys(signing_key_file), ring, store) as insp:
        report = insp.rotate_keys(restart=restart, max_pages=max_pages)
    if as_json:
        emit_json(asdict(report))
        return
    state = "done" if report.done else "stopped (run it again to go on)"
    echo(f"rotation to key {ring.newest!r} {state}: {report.rewritten} task(s) re-encrypted, "
         f"{report.rewrapped} tenant key(s) sealed again, {report.skipped} skipped (active or changing: run it "
         f"again), {report.failed} unreadable (left as they are)")


@click.group()
def tenant() -> None:
    """A tenant's data: erase it (docs/encryption.md "Per-tenant keys")."""


@tenant.command()
@click.argument("queue")
@click.argument("tenant_name", metavar="TENANT")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@encryption_keys_option
@redis_url_option
@user_errors
def forget(queue: str, tenant_name: str, yes: bool, as_json: bool, encryption_keys_file: str | None,
           redis_url: str) -> None:
    """Erase TENANT of QUEUE: destroy its encryption key (what was sealed with it can never be read
    again), delete its tasks that are not running, and record the audit event tenant_forgotten."""
    validate_queue(queue), validate_tenant(tenant_name)  # (a bad name: exit 2 before the question)
    if not yes:
        ask(f"Destroy the key of tenant {tenant_name!r} in queue {queue!r} and delete its tasks? This cannot "
            "be undone")
    with inspector(redis_url, encryption=encryption_ring(encryption_keys_file)) as insp:
        report = insp.forget_tenant(queue, tenant_name)
    if as_json:
        emit_json(asdict(report))
        return
    key = "its key destroyed" if report.key else "it had no key"
    echo(f"tenant {tenant_name!r} of queue {queue!r} forgotten: {key}, {report.removed} task(s) deleted"
         + (f", {report.left} running (unreadable now: forget again once they end)" if report.left else ""))
