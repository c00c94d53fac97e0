"""``asynqpy outbox``: the transactional outbox's relay and table (:mod:`asynqpy.contrib.outbox`; the
``sqlalchemy`` extra and a database driver, e.g. ``psycopg[binary]``)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click

from .common import (
    SafePath,
    UserError,
    echo,
    json_text,
    redis_url_option,
    signing_key_option,
    signing_keys,
    user_errors,
)

log = logging.getLogger("asynqpy.cli")

PASSWORD_ENV = "ASYNQPY_DB_PASSWORD"
"""The environment variable holding the outbox database's password (not on the command line)."""

password_file_option = click.option(
    "--db-password-file", type=SafePath(dir_okay=False), default=None, envvar="ASYNQPY_DB_PASSWORD_FILE",
    help="A file whose first line is the outbox database's password, for a --db/--outbox URL without one (kept "
         "out of `ps`); default $ASYNQPY_DB_PASSWORD_FILE, else $ASYNQPY_DB_PASSWORD holds the password itself.")


def engine_of(db_url: str, flag: str = "--db", password_file: str | None = None) -> Any:
    """A SQLAlchemy engine on ``db_url``; a URL without a password gets the one of
    ``password_file`` (its first line), else of ``$ASYNQPY_DB_PASSWORD``, so that it is never on a
    command line (``ps`` shows those, and a worker passes its own to each child process). A
    password in the URL itself is used, with a warning. UserError (one line naming ``flag``)."""
    try:
        import sqlalchemy as sa
    except ImportError:
        raise UserError("the outbox needs SQLAlchemy and a driver: pip install '.[postgres]' in asynqpy's "
                        "repository") from None
    try:
        url = sa.engine.make_url(db_url)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise UserError(f"{flag}: {_first_line(exc)}") from None
    password: str | None = None
    if password_file is not None:
        try:
            lines = Path(password_file).read_text().splitlines()
        except (OSError, UnicodeError) as exc:  # (UnicodeEncodeError: a path no file system can name)
            raise UserError(f"--db-password-file: cannot read {password_file!r}: {exc}") from None
        if not lines or not lines[0].strip():
            raise UserError(f"--db-password-file: {password_file!r} holds no password on its first line")
        password = lines[0].strip()
    elif os.environ.get(PASSWORD_ENV):
        password = os.environ[PASSWORD_ENV]
    if url.password is not None:
        if password is not None:
            raise UserError(f"{flag}: the URL holds a password and one is given by --db-password-file or "
                            f"${PASSWORD_ENV}: give it once")
        log.warning("%s: the database password is on the command line (visible in `ps`): put it in $%s or "
                    "--db-password-file instead", flag, PASSWORD_ENV)
    elif password is not None:
        url = url.set(password=password)
    try:
        return sa.create_engine(url)  # (a dropped connection fails one batch, retried: no ping per batch)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise UserError(f"{flag}: {_first_line(exc)}") from None


def make_relay(db_url: str, redis_url: str, keys: list[bytes] | None = None, flag: str = "--db",
               password_file: str | None = None, **options: Any) -> Any:
    """A :class:`asynqpy.contrib.outbox.Relay` on ``db_url``, its database reached and its table found
    (else UserError: one line naming ``flag``, exit code 2). Shared by ``outbox relay`` and
    ``worker --outbox``."""
    import sqlalchemy as sa

    from asynqpy.contrib.outbox import Relay, missing_columns

    engine = engine_of(db_url, flag, password_file)
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
    with engine.connect() as conn:
        missing = missing_columns(conn, relay.table)
    if missing:
        raise UserError(f"{flag}: the table {relay.table.name!r} lacks the column(s) {', '.join(missing)} (made by an "
                        "earlier version): run `asynqpy outbox create-table --db URL` once (it adds them)")
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
@password_file_option
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
def relay(db_url: str, db_password_file: str | None, batch: int, poll: float, ordered: bool,
          signing_key_file: str | None, redis_url: str) -> None:
    """Send committed outbox rows to Redis, each task once, until SIGTERM or Ctrl-C. Several
    relays may run at once (standbys taking turns, or sharing the rows with --unordered). With
    --signing-key-file the relay verifies each row's signature (made by the application that
    wrote it) and sets aside an unsigned or forged row (`asynqpy outbox failed`); it never signs.
    Exits 1 if the relay stops on an error (logged), 0 when stopped."""
    r = make_relay(db_url, redis_url, signing_keys(signing_key_file), password_file=db_password_file, batch=batch,
                   poll=poll, ordered=ordered)
    echo(f"relaying the outbox of {r.engine.url.render_as_string(hide_password=True)} (Ctrl-C stops)",
               err=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        r.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    crashed: list[BaseException] = []

    def run() -> None:
        try:
            r.run()
        except BaseException as exc:  # noqa: BLE001 - logged by the relay; the exit status says it
            crashed.append(exc)

    thread = threading.Thread(target=run, name="asynqpy-outbox-relay")
    thread.start()
    while thread.is_alive():  # (the main thread stays free for the signal handlers)
        thread.join(0.5)
    if crashed:
        echo(f"error: the outbox relay stopped: {_first_line(crashed[0])}", err=True)
        sys.exit(1)


def _relay_for_rows(db_url: str, password_file: str | None) -> Any:
    """A relay for looking at the table (Redis is not used)."""
    import sqlalchemy as sa

    from asynqpy.contrib.outbox import Relay

    engine = engine_of(db_url, "--db", password_file)
    relay = Relay(engine, "memory://asynqpy-cli-outbox")
    try:
        found = sa.inspect(engine).has_table(relay.table.name, schema=relay.table.schema)
    except sa.exc.DBAPIError as exc:
        raise UserError(f"--db: cannot reach the database: {_first_line(exc)}") from None
    if not found:
        raise UserError(f"--db: no table {relay.table.name!r}")
    return relay


@outbox.command()
@db_option
@password_file_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@user_errors
def failed(db_url: str, db_password_file: str | None, as_json: bool) -> None:
    """List the rows the relay set aside (never sent: an unsigned or forged row, a malformed
    column), with why. `asynqpy outbox retry` sends them again, `asynqpy outbox discard` deletes them."""
    rows = _relay_for_rows(db_url, db_password_file).set_aside()
    for row in rows:
        if as_json:
            echo(json_text(row.__dict__))
        else:
            echo(f"{row.seq}\t{row.id}\t{row.queue}\t{row.kind}\t{row.error}")
    if not rows and not as_json:
        echo("no row set aside", err=True)


@outbox.command()
@db_option
@password_file_option
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every row set aside.")
@user_errors
def retry(db_url: str, db_password_file: str | None, ids: tuple[str, ...], every: bool) -> None:
    """Let the relay try the set-aside rows of task IDS (or --all) again (once their cause is
    fixed, e.g. the relay's signing keys)."""
    if bool(ids) == every:
        raise UserError("give task ids or --all")
    n = _relay_for_rows(db_url, db_password_file).retry(None if every else list(ids))
    echo(f"{n} row(s) will be tried again")


@outbox.command()
@db_option
@password_file_option
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every row set aside.")
@user_errors
def discard(db_url: str, db_password_file: str | None, ids: tuple[str, ...], every: bool) -> None:
    """Delete the set-aside rows of task IDS (or --all)."""
    if bool(ids) == every:
        raise UserError("give task ids or --all")
    n = _relay_for_rows(db_url, db_password_file).discard(None if every else list(ids))
    echo(f"{n} row(s) deleted")


@outbox.command("create-table")
@db_option
@password_file_option
@user_errors
def create_table(db_url: str, db_password_file: str | None) -> None:
    """Create the outbox table (and on PostgreSQL its NOTIFY trigger) if missing; add the columns
    a table made by an earlier version lacks (``error``)."""
    import sqlalchemy as sa

    from asynqpy.contrib.outbox import Outbox

    try:
        Outbox(engine_of(db_url, "--db", db_password_file)).create_table()
    except sa.exc.OperationalError as exc:
        raise UserError(f"--db: cannot reach the database: {_first_line(exc)}") from None
    echo("outbox table ready")
