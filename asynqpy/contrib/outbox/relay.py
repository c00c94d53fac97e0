"""The outbox's relay: :class:`Relay` moves committed rows to Redis, each task once (the
package's docstring tells how), batch after batch, woken by PostgreSQL's NOTIFY or polling."""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Sequence
from typing import Any

from ...core.model import kinds
from ...core.model import options as opts
from ...core.model.codec import Message
from ...core.model.errors import AsynqpyError, InvalidArgumentError, RedisUnavailableError
from ...core.security.signing import Refused, SigningKeys, make_signer, trust_gate
from ...core.spine.broker import Broker, Call
from ...core.spine.keys import queue_keys
from ...core.workflows import plans as flows
from ...redisio.connection import REDIS_ERRORS, is_cluster, sync_client
from ...redisio.executor import SyncExecutor, evalsha_args, unavailable
from ...redisio.scripts import load_scripts
from .rows import (
    BadRow,
    RowTask,
    Sent,
    SetAside,
    db_errors,
    row_kind,
    segments,
    short_error,
    store_outcome,
    valid_queue,
)
from .table import TABLE, OutboxTableError, missing_columns, need_sqlalchemy, outbox_table

__all__ = ["MARKER_TTL", "Relay"]

log = logging.getLogger("asynqpy.outbox")

MARKER_TTL = 7 * 86400
"""Seconds a sent task's marker lives if the relay dies before its row's delete commits: a relay
started within this long after such a crash sends nothing twice."""

STOP_CHECK = 0.2
"""Seconds between two looks at the stop signal while the relay waits for a notification."""


class _RelayBroker(Broker):
    """The relay's broker: it stores a row's bytes as the producer wrote (and signed) them; it
    never signs them. The one message it seals is a rewrite of a row that passed the trust gate
    (a child with ``after=`` whose parent already failed, stored cancelled), with the relay's key
    (none: unsigned)."""

    def seal(self, queue: str, id: str, msg: Message, data: bytes | None = None, sign: bool = True) -> bytes:
        if data is not None:
            return data
        return super().seal(queue, id, msg, None, sign)


class Relay:
    """Moves committed outbox rows to Redis (see the module's docstring for the guarantees).

    ``db``: a SQLAlchemy URL or sync ``Engine``; ``redis``: a Redis URL or client (a single
    server, Sentinel or a Cluster: one MULTI per queue there). ``batch``: rows per transaction.
    ``poll``: the longest wait between two looks when nothing is notified (PostgreSQL with
    psycopg is woken by NOTIFY; elsewhere the wait starts at ``poll_min`` and doubles while idle).
    ``marker_ttl``: see :data:`MARKER_TTL`. ``signing_key``: the workers' key(s) (a list: every
    one verifies, as :class:`~asynqpy.core.security.signing.Signer` does). The relay never signs: the
    application signs each row when it writes it (``Outbox(signing_key=)``); with a key the relay
    verifies each row through :func:`~asynqpy.core.security.signing.trust_gate` and sets aside (never
    sends) one that is unsigned or whose tag matches no key; without a key it sends the rows'
    bytes as written (a keyed worker verifies them). ``ordered`` (PostgreSQL): relays of the table
    take turns (a transaction-level advisory lock per batch), so one producer's tasks reach Redis
    in its commit order even with several relays (the others are standbys); False: they work at
    once, each on rows the others have not locked (``SKIP LOCKED``), and their batches may
    interleave. (SQLite serializes writers: its relays always take turns.)"""

    def __init__(self, db: Any, redis: Any = None, *, table: str = TABLE, schema: str | None = None,
                 batch: int = 500, poll: float = 1.0, poll_min: float = 0.005, marker_ttl: int = MARKER_TTL,
                 signing_key: SigningKeys | None = None, ordered: bool = True) -> None:
        sa = need_sqlalchemy()
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
        self.signer = make_signer(signing_key)
        self.broker = _RelayBroker(None, self.signer)
        self._exec = SyncExecutor(self.redis)
        self._listener: Any = None
        t = self.table
        chosen = (sa.select(t.c.seq).where(t.c.error.is_(None)).order_by(t.c.seq).limit(batch)
                  .with_for_update(skip_locked=True))
        self._take = t.delete().where(t.c.seq.in_(chosen.scalar_subquery())).returning(*t.c)
        self.stop_event = threading.Event()
        self.ordered = ordered
        self._checked = False
        self._down: str | None = None  # why the looks fail (an outage going on), else None
        self._down_since = 0.0
        self._failures = 0
        # PostgreSQL: the transaction-level advisory lock ordered relays take turns with
        self._turn = sa.select(sa.func.pg_try_advisory_xact_lock(zlib.crc32(t.fullname.encode()) & 0x7FFFFFFF))

    # -- one batch -----------------------------------------------------------------------------

    def relay_once(self) -> Sent:
        """Send one batch of committed rows (at most ``batch``); what it did. Raises the database's
        or Redis's error (nothing is then deleted: the rows are sent again, at most once)."""
        if not self._checked:
            with self.engine.connect() as conn:
                self._check_table(conn)
        with self.engine.connect() as conn:
            with conn.begin():
                rows = self._take_rows(conn)
                if not rows:
                    return Sent()
                sent, markers = self._relay(conn, rows)
            # committed: the rows are gone, their markers may go too
        self._drop_markers(markers)
        return sent

    def _take_rows(self, conn: Any) -> list[Any]:
        """This batch's rows, oldest first, deleted in the transaction; none while it is another
        ordered relay's turn (PostgreSQL: it sends, this one waits, a standby)."""
        if self.ordered and conn.dialect.name == "postgresql" and not conn.execute(self._turn).scalar():
            return []
        return sorted(conn.execute(self._take).all(), key=lambda r: r.seq)

    def _relay(self, conn: Any, rows: Sequence[Any]) -> tuple[Sent, list[str]]:
        """Send the batch's valid rows and set the others aside (put back with their error); what
        was done and the markers set."""
        tasks: list[RowTask] = []
        bad: list[tuple[Any, str]] = []
        for r in rows:
            try:
                tasks.append(self._task(r))
            except Exception as exc:  # noqa: BLE001 - any malformed column: this row only
                bad.append((r, short_error(exc)))
        # every valid queue named is registered (a set-aside row's too: where an operator looks for it)
        self._register([r.queue for r, _ in bad if valid_queue(r.queue)] + [t.queue for t in tasks])
        sent, markers, unsent = self._send(tasks) if tasks else (Sent(), [], [])
        by_seq = {r.seq: r for r in rows}
        bad += [(by_seq[t.seq], why) for t, why in unsent]
        if bad:
            self._set_aside(conn, bad)
            sent = Sent(sent.stored, sent.already, sent.refused, len(bad))
        return sent, markers

    def _drop_markers(self, markers: Sequence[str]) -> None:
        """Delete the markers of a committed batch (its rows are gone); if Redis fails, they expire
        (``marker_ttl``)."""
        try:
            if markers:
                self.redis.delete(*markers)
        except REDIS_ERRORS as exc:
            log.warning("could not delete %d outbox markers (they expire): %s", len(markers), exc)

    def _check_table(self, conn: Any) -> None:
        """The table has every column this version reads (else InvalidArgumentError saying how to
        add them: a table made by an earlier version lacks ``error``)."""
        missing = missing_columns(conn, self.table)
        if missing:
            raise OutboxTableError(
                f"the outbox table {self.table.fullname} lacks the column(s) {', '.join(missing)} (made by an earlier "
                f"version): run `asynqpy outbox create-table --db URL` or Outbox.create_table() once, or in a "
                f"migration: ALTER TABLE {self.table.fullname} ADD COLUMN error TEXT")
        self._checked = True

    def _task(self, r: Any) -> RowTask:
        """A row as the task it stores, checked: its columns (BadRow), and its message through the
        trust gate (the relay's key: the producer's tag; no key: its encoding)."""
        kind = row_kind(r)
        data = bytes(r.data)
        gate = trust_gate(self.signer, r.queue, r.id, data)
        if isinstance(gate, Refused):
            raise BadRow(gate.reason)
        delay = max(1, r.due_ms - self.broker.clock.local_ms()) if r.due_ms else 0
        if kind is kinds.TaskKind.WAITING:
            return RowTask(r.seq, r.id, r.queue, kind, data, delay, r.unique_ttl, "", bool(r.generated),
                         r.mode or "c", gate.msg)
        return RowTask(r.seq, r.id, r.queue, kind, data, delay, r.unique_ttl, r.mode or "", bool(r.generated),
                     "c", gate.msg)

    def _set_aside(self, conn: Any, bad: Sequence[tuple[Any, str]]) -> None:
        """Put the rows ``bad`` (taken by this batch's delete) back, each with its error: the
        relay skips them from then on (:meth:`set_aside` lists them, :meth:`retry` and
        :meth:`discard` act on them)."""
        for r, why in bad:
            log.error("outbox row %s (task %r, queue %r) set aside, not sent: %s", r.seq, r.id, r.queue, why)
        conn.execute(self.table.insert(), [{**r._asdict(), "error": why[:2000]} for r, why in bad])

    def _send(self, tasks: Sequence[RowTask]) -> tuple[Sent, list[str], list[tuple[RowTask, str]]]:
        """Store ``tasks`` in Redis, each once (see the module's docstring); the markers set, and
        the tasks that could not even be made into a store call (set aside, with why)."""
        markers = [queue_keys(t.queue).batch("o." + t.id) for t in tasks]
        todo, replies = self._store_all(tasks, markers)
        stored = refused = 0
        failed: list[tuple[str, BaseException]] = []
        unsent: list[tuple[RowTask, str]] = []
        for (t, m, call), reply in zip(todo, replies):
            outcome = store_outcome(call, reply)
            if outcome is None:
                stored += 1
            elif isinstance(outcome, BadRow):
                unsent.append((t, str(outcome)))
            elif isinstance(outcome, AsynqpyError) and not outcome.transient:  # (core/model/errors.py)
                refused += 1
                log.warning("outbox task %s (queue %s) refused by Redis, its row deleted: %s", t.id, t.queue, outcome)
            else:
                failed.append((m, outcome))
        if failed:  # not stored (Redis full, a transient refusal, ...): their markers go, the batch is rolled back
            self.redis.delete(*[m for m, _ in failed])
            raise failed[0][1]
        return Sent(stored, len(tasks) - len(todo), refused), markers, unsent

    def _store_all(self, tasks: Sequence[RowTask], markers: Sequence[str]
                   ) -> tuple[list[tuple[RowTask, str, Call[Any] | BaseException]], list[Any]]:
        """Store the batch segment by segment, each segment in one MULTI per client
        (:meth:`_groups`): the tasks sent with their call (or the error refusing them) and each
        one's reply. Redis unreachable raises (the groups stored before keep their markers)."""
        todo: list[tuple[RowTask, str, Call[Any] | BaseException]] = []
        replies: list[Any] = []
        try:
            for segment in segments(tasks):
                for client, idx in self._groups([tasks[i] for i in segment], [markers[i] for i in segment]):
                    calls, got = self._store(client, [tasks[segment[i]] for i in idx],
                                             [markers[segment[i]] for i in idx])
                    todo += calls
                    replies += got
        except REDIS_ERRORS as exc:
            raise unavailable(exc) or exc from exc
        return todo, replies

    def _register(self, queues: Sequence[str]) -> None:
        """Register the batch's queues, every batch: a queue an operator removed since the last
        batch is known again (a cache of the queues registered left it unknown for good)."""
        if queues:
            self._exec.run(self.broker.register_queues(sorted(set(queues))))

    def _groups(self, tasks: Sequence[RowTask], markers: Sequence[str]) -> list[tuple[Any, list[int]]]:
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

    def _store(self, client: Any, tasks: Sequence[RowTask],
               markers: Sequence[str]) -> tuple[list[tuple[RowTask, str, Call[Any] | BaseException]], list[Any]]:
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

    def _call(self, t: RowTask) -> Call[Any] | BaseException:
        """The call storing ``t`` by its kind; a task with ``after=`` is first registered with its
        parents (each in its own slot, as ``Client.enqueue`` does), and a refusal there (a parent
        missing) is returned. Redis unreachable raises."""
        if t.kind is not kinds.TaskKind.WAITING:
            try:
                return kinds.store_call(self.broker, t)
            except (AsynqpyError, ValueError, TypeError) as exc:  # the row's columns do not make a call
                return BadRow(f"{type(exc).__name__}: {exc}")
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
        outages are waited out (backing off to ``poll``), logged once when they start and once
        when they end; a bad row is set aside (:meth:`set_aside`), never stops the relay; an
        unexpected error is logged with its traceback and retried the same way. Only a table
        lacking a column this version needs (:class:`OutboxTableError`) ends it: it raises (the
        CLI exits non-zero)."""
        stop = stop or self.stop_event
        idle = self.poll_min
        retried: tuple[type[BaseException], ...] = (AsynqpyError, *REDIS_ERRORS, *db_errors())
        while not stop.is_set():
            try:
                listening = self._listen() is not None  # LISTEN before the look: no commit is missed
                sent = self.relay_once()
            except OutboxTableError:
                log.error("outbox relay stopped", exc_info=True)
                self._close_listener()
                raise
            except retried as exc:
                self._failed(exc, expected=True)
                self._close_listener()
                stop.wait(idle)
                idle = min(self.poll, idle * 2)
                continue
            except Exception as exc:  # noqa: BLE001 - a bug must not end the relay silently: logged, retried
                self._failed(exc, expected=False)
                self._close_listener()
                stop.wait(idle)
                idle = min(self.poll, idle * 2)
                continue
            self._back()
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

    def _failed(self, exc: BaseException, expected: bool) -> None:
        """A look failed: the first failure of an outage is logged (WARNING; an unexpected error
        with its traceback), the next ones at DEBUG, until :meth:`_back`."""
        why = short_error(exc)
        self._failures += 1
        if self._down is None:
            self._down, self._down_since = why, time.monotonic()
            log.warning("outbox relay: cannot relay: %s (retrying, at most %gs apart; one line when it is back)",
                        why, self.poll, exc_info=not expected)
        else:
            log.debug("outbox relay: still failing: %s", why)

    def _back(self) -> None:
        """A look succeeded: the end of an outage is logged once."""
        if self._down is not None:
            log.warning("outbox relay: relaying again after %.1fs (%d failed look(s); it was: %s)",
                        time.monotonic() - self._down_since, self._failures, self._down)
            self._down = None
        self._failures = 0

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
            log.warning("outbox relay: the LISTEN connection broke: %s", short_error(exc))
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
        """How many rows wait to be sent (committed, not yet relayed, not set aside)."""
        sa = need_sqlalchemy()
        t = self.table
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(t).where(t.c.error.is_(None))).scalar_one())

    def set_aside(self, limit: int = 1000) -> list[SetAside]:
        """The rows set aside (never sent: a bad signature, an unsigned row where the relay has a
        key, a malformed column), oldest first, with their error (``asynqpy outbox failed``)."""
        sa = need_sqlalchemy()
        t = self.table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.seq, t.c.id, t.c.queue, t.c.kind, t.c.error)
                                .where(t.c.error.is_not(None)).order_by(t.c.seq).limit(limit)).all()
        return [SetAside(int(r.seq), str(r.id), str(r.queue), str(r.kind), str(r.error)) for r in rows]

    def retry(self, ids: Sequence[str] | None = None) -> int:
        """Clear the error of the set-aside rows of task ``ids`` (None: all): the relay tries them
        again (after the cause was fixed, e.g. the relay's key list). How many."""
        return self._act(ids, delete=False)

    def discard(self, ids: Sequence[str] | None = None) -> int:
        """Delete the set-aside rows of task ``ids`` (None: all); how many."""
        return self._act(ids, delete=True)

    def _act(self, ids: Sequence[str] | None, delete: bool) -> int:
        t = self.table
        cond = t.c.error.is_not(None)
        if ids is not None:
            cond = cond & t.c.id.in_(list(ids))
        stmt = t.delete().where(cond) if delete else t.update().where(cond).values(error=None)
        with self.engine.begin() as conn:
            return int(conn.execute(stmt).rowcount or 0)
