"""The relay's view of the outbox rows: a row read back as the task it stores
(:class:`RowTask`), its columns checked (:class:`BadRow` says which is wrong), what a batch did
(:class:`Sent`), a row set aside (:class:`SetAside`), and the small rules of a batch (its segments
around a task with ``after=``, a store call's outcome)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...core.model import codec, kinds
from ...core.model import options as opts
from ...core.model.codec import Message
from ...core.model.errors import AsynqpyError, InvalidArgumentError
from ...core.spine.broker import Call
from ...core.spine.keys import validate_name, validate_queue
from ...core.workflows.records import POLICIES
from ...redisio.executor import unavailable
from .table import need_sqlalchemy

_POLICY_CODES = tuple(POLICIES.values())
"""The ``mode`` column of a task with ``after=``: its ``on_parent_failure`` code."""


@dataclass
class RowTask:
    """A row read back as what :func:`asynqpy.core.model.kinds.store_call` stores (``Storable``)."""

    seq: int
    id: str
    queue: str
    kind: kinds.TaskKind
    data: bytes
    delay_ms: int
    unique_ttl: int
    mode: str
    generated_id: bool
    policy: str = "c"  # a task with after=: its on_parent_failure code (the row's mode column)
    _msg: Message | None = None
    keep_finished: bool = False  # (set only for an idempotent process call, which no outbox row is)

    @property
    def msg(self) -> Message:
        if self._msg is None:
            self._msg = codec.decode(self.data)
        return self._msg


@dataclass(frozen=True)
class Sent:
    """What one :meth:`Relay.relay_once` did: ``stored`` tasks stored now, ``already`` found
    stored by an earlier relay that died before its delete committed, ``refused`` refused by Redis
    for good (a unique task's duplicate, a throttle, a live task holding a ``task_id``: logged,
    its row deleted, as ``Client.enqueue`` would have raised), ``set_aside``: rows the relay will
    not send (a bad signature, an unsigned row where the relay has a key, a malformed column):
    kept in the table with their ``error`` (:meth:`Relay.set_aside`), logged, skipped from then on."""

    stored: int = 0
    already: int = 0
    refused: int = 0
    set_aside: int = 0

    @property
    def rows(self) -> int:
        return self.stored + self.already + self.refused + self.set_aside


@dataclass(frozen=True)
class SetAside:
    """A row the relay set aside (:meth:`Relay.set_aside`): its ``seq``, task ``id``, ``queue``,
    ``kind`` and ``error``."""

    seq: int
    id: str
    queue: str
    kind: str
    error: str


class OutboxTableError(InvalidArgumentError):
    """The outbox table lacks a column this version reads (made by an earlier version)."""


class BadRow(AsynqpyError):
    """An outbox row the relay cannot send as it is (set aside with this error)."""


def segments(tasks: Sequence[RowTask]) -> list[list[int]]:
    """The batch in order, cut around each task with ``after=``: its parents (maybe in the same
    batch, earlier) are stored before it registers with them."""
    out: list[list[int]] = [[]]
    for i, t in enumerate(tasks):
        if t.kind is kinds.TaskKind.WAITING:
            out += [[i], []]
        else:
            out[-1].append(i)
    return [seg for seg in out if seg]


def row_kind(r: Any) -> kinds.TaskKind:
    """A row's kind, its columns checked (BadRow says which is wrong): the kind, the task id and
    queue name, the mode the kind allows, and the two counts."""
    try:
        kind = kinds.TaskKind(r.kind)
    except ValueError:
        raise BadRow(f"unknown kind {r.kind!r}") from None
    _check_names(r)
    _check_mode(r, kind)
    for name in ("due_ms", "unique_ttl"):
        v = getattr(r, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise BadRow(f"{name} must be an int >= 0, got {v!r}")
    return kind


def _check_names(r: Any) -> None:
    """A row's task id and queue name are given and valid (else BadRow)."""
    if not isinstance(r.id, str) or not r.id or not isinstance(r.queue, str):
        raise BadRow("a task id and a queue name are required")
    try:
        validate_queue(r.queue)
        validate_name("task id", r.id, opts.MAX_ID_LEN)
    except InvalidArgumentError as exc:
        raise BadRow(str(exc)) from None


def _check_mode(r: Any, kind: kinds.TaskKind) -> None:
    """A row's mode is one its kind allows: a waiting task's policy (none: the default), else
    "", "t" or "d" (else BadRow)."""
    modes = _POLICY_CODES if kind is kinds.TaskKind.WAITING else ("", "t", "d")
    if (r.mode or "") not in modes and not (kind is kinds.TaskKind.WAITING and not r.mode):
        raise BadRow(f"mode must be one of {modes!r} for a {kind.value} task, got {r.mode!r}")


def valid_queue(queue: Any) -> bool:
    try:
        validate_queue(queue)
    except (InvalidArgumentError, TypeError):
        return False
    return True


def store_outcome(call: Call[Any] | BaseException, reply: Any) -> BaseException | None:
    """None if the store call succeeded, else the error its reply means."""
    if isinstance(call, BaseException):
        return call
    if isinstance(reply, BaseException):
        return unavailable(reply) or reply
    try:
        call.parse(reply)
    except Exception as exc:  # noqa: BLE001 - a typed refusal (DuplicateTaskError, ...)
        return exc
    return None


def short_error(exc: BaseException) -> str:
    """An error's first line (a database error's own, without SQLAlchemy's statement dump)."""
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def db_errors() -> tuple[type[BaseException], ...]:
    sa = need_sqlalchemy()
    errors: tuple[type[BaseException], ...] = (sa.exc.DBAPIError, sa.exc.InterfaceError, OSError)
    try:
        import psycopg
    except ImportError:
        return errors
    return (*errors, psycopg.Error)  # (the LISTEN connection is psycopg's own)
