"""``asynqpy outbox``: the transactional outbox's relay and table (:mod:`asynqpy.outbox`; the
``sqlalchemy`` extra and a database driver, e.g. ``psycopg[binary]``)."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import click

from .common import UserError, echo, redis_url_option, signing_key_option, signing_keys, user_errors


def make_relay(db_url: str, redis_url: str, keys: list[bytes] | None = None, flag: str = "--db",
               **options: Any) -> Any:
    """A :class:`asynqpy.outbox.Relay` on ``db_url``, its database reached and its table found
    (else UserError: one line naming ``flag``, exit code 2). Shared by ``outbox relay`` and
    ``worker --outbox``."""
    try:
        import sqlalchemy as sa
    except ImportError:
        raise UserError("the outbox needs SQLAlchemy and a driver: pip install '.[postgres]' in asynqpy's "
                        "repository") from None
    from asynqpy.outbox import Relay

    try:
        engine = sa.create_engine(db_url)  # (a dropped connection fails one batch, retried: no ping per batch)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise UserError(f"{flag}: {_first_line(exc)}") from None
    try:
        relay = Relay(engine, redis_url, signing_key=keys, **options)
    except ValueError as exc:  # a malformed Redis URL
        raise UserError(f"--redis-url: {exc}") from None
    try:
        found = sa.inspect(engine).has_table(relay.table.name, schema=relay.table.schema)
    except sa.exc.DBAPIError as exc:
        raise UserError(f"{flag}: cannot reach the database: {_first_line(exc)}") from None
    if not found:
        raise UserError(f"{flag}: no table {relay.table.name!r}: create it with `asynqpy outbox create-table --db "
                        "URL` or Outbox.create_table() (or Outbox.ddl() in a migration)")
    relay.redis.ping()  # unreachable: one line (user_errors)
    return relay


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


@click.group()
def outbox() -> None:
    """The transactional outbox: tasks written in your database transaction, sent to Redis once
    committed (docs/integrations.md)."""


db_option = click.option("--db", "db_url", required=True, metavar="URL",
                         help="The database's SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db or "
                              "sqlite:///app.db.")


@outbox.command()
@db_option
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 10_000),
              help="Rows per transaction.")
@click.option("--poll", default=1.0, show_default=True, type=click.FloatRange(min=0.001, max=3600),
              help="Longest wait in seconds between two looks (PostgreSQL with psycopg is also woken by NOTIFY).")
@click.option("--ordered/--unordered", default=True, show_default=True,
              help="PostgreSQL: relays take turns, keeping each producer's commit order (--unordered: they work "
                   "at once on rows the others have not locked, SKIP LOCKED, batches interleaved).")
@signing_key_option
@redis_url_option
@user_errors
def relay(db_url: str, batch: int, poll: float, ordered: bool, signing_key_file: str | None, redis_url: str) -> None:
    """Send committed outbox rows to Redis, each task once, until SIGTERM or Ctrl-C. Several
    relays may run at once (standbys taking turns, or sharing the rows with --unordered)."""
    r = make_relay(db_url, redis_url, signing_keys(signing_key_file), batch=batch, poll=poll, ordered=ordered)
    echo(f"relaying the outbox of {r.engine.url.render_as_string(hide_password=True)} (Ctrl-C stops)",
               err=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        r.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    thread = threading.Thread(target=r.run, name="asynqpy-outbox-relay")
    thread.start()
    while thread.is_alive():  # (the main thread stays free for the signal handlers)
        thread.join(0.5)


@outbox.command("create-table")
@db_option
@user_errors
def create_table(db_url: str) -> None:
    """Create the outbox table (and on PostgreSQL its NOTIFY trigger) if missing."""
    import sqlalchemy as sa

    from asynqpy.outbox import Outbox

    try:
        Outbox(sa.create_engine(db_url)).create_table()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise UserError(f"--db: {_first_line(exc)}") from None
    except sa.exc.OperationalError as exc:
        raise UserError(f"--db: cannot reach the database: {_first_line(exc)}") from None
    echo("outbox table ready")
