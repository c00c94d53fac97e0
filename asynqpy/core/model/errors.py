"""Errors raised by asynqpy and the control signals handlers raise.

Every library error derives from :class:`AsynqpyError`. Control signals (:class:`SkipRetry`) are
raised *by handlers* to steer what happens to a failed task; they are not library errors.
"""

from __future__ import annotations

from typing import Any, ClassVar

from redis.exceptions import AuthenticationError as RedisAuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError


class AsynqpyError(Exception):
    """Base class of every error asynqpy raises."""

    reply_code: ClassVar[int | None] = None
    """The code a producer script replies with to refuse a call with this error (the reply-code
    table :data:`REPLY_ERRORS` is made from it: a new typed refusal is one class here and its
    Lua ``return``); None: no script replies with it."""
    transient: ClassVar[bool] = False
    """True: the refusal may pass by itself (Redis back, room in a queue): the same call may be
    sent again later (the outbox keeps its rows for the next pass instead of dropping them)."""

    @classmethod
    def from_reply(cls, queue: str, id: str, count: int) -> AsynqpyError:
        """The error for a script's reply :attr:`reply_code` to a call storing ``count`` task(s)
        (``id``: the task's id, '' for a batch) in ``queue``."""
        return cls(f"queue {queue!r} refused {count} task(s) (reply {cls.reply_code})")


class InvalidArgumentError(AsynqpyError, ValueError):
    """An argument is invalid (empty task type, bad queue name, negative delay, ...)."""


SCRIPT_REFUSED = "asynqpy-refused:"
"""The mark of a script's refusal of an input it was given (lua/includes/bands.lua due_guard): the
script raises it before its first write, so nothing changed; the executor raises it to the caller as
:class:`InvalidArgumentError` (:func:`script_refusal`)."""


def script_refusal(exc: BaseException) -> InvalidArgumentError | None:
    """A script's refusal (an error reply holding :data:`SCRIPT_REFUSED`) as an
    :class:`InvalidArgumentError` (cause kept), else None."""
    text = str(exc)
    at = text.find(SCRIPT_REFUSED)
    if at < 0 or isinstance(exc, AsynqpyError):
        return None
    err = InvalidArgumentError(text[at + len(SCRIPT_REFUSED):].strip())
    err.__cause__ = exc
    return err


class PayloadError(InvalidArgumentError):
    """A payload cannot be encoded (not msgpack-serializable) or is larger than the limit."""


class DuplicateTaskError(AsynqpyError):
    """A unique task with the same queue and key (``unique_key``, else type and payload) is still
    live: its lock is held. ``holder``: the id of the task holding it ('' when not known);
    ``expires_in``: seconds until the lock runs out unless its holder releases it sooner."""

    def __init__(self, message: str, holder: str = "", expires_in: float = 0.0) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires_in = expires_in

    def __reduce__(self) -> Any:
        return type(self), (str(self), self.holder, self.expires_in)


class ThrottledError(DuplicateTaskError):
    """``enqueue(..., throttle=window)`` refused the task: a task with the same key was enqueued
    less than ``window`` seconds ago (``holder`` names it; ``expires_in``: seconds until the
    window ends and the key may be used again)."""


class TaskIdConflictError(AsynqpyError):
    """A live task (pending, active, scheduled or retry) already has this task id."""

    reply_code = -2

    @classmethod
    def from_reply(cls, queue: str, id: str, count: int) -> AsynqpyError:
        return cls(f"a live task with id {id!r} exists in queue {queue!r}")


class QueueFullError(AsynqpyError):
    """The queue (or the task's tenant) holds as many pending tasks as its cap allows and its
    overflow is "reject" (:meth:`~asynqpy.Inspector.set_queue_cap`, docs/queues.md "Bounded queues"):
    nothing of the call was stored (a batch is refused whole) and nothing already queued was
    touched. ``queue``: the queue; ``count``: how many tasks were refused."""

    reply_code = -10  # (lua/includes/cap.lua QUEUE_FULL)
    transient = True

    @classmethod
    def from_reply(cls, queue: str, id: str, count: int) -> AsynqpyError:
        return cls(f"queue {queue!r} is full: its cap (or its tenant's) refused {count} task(s) "
                   f"(overflow 'reject'; nothing was stored)", queue, count)

    def __init__(self, message: str, queue: str = "", count: int = 1) -> None:
        super().__init__(message)
        self.queue = queue
        self.count = count

    def __reduce__(self) -> Any:
        return type(self), (str(self), self.queue, self.count)


class TaskNotFoundError(AsynqpyError):
    """No task with this id in this queue."""


class QueueNotFoundError(AsynqpyError):
    """No queue with this name."""


class EntryNotFoundError(AsynqpyError):
    """No scheduler entry (periodic task) with this name in this queue."""


class ServerNotFoundError(AsynqpyError):
    """No live server with this id (never was, stopped, or its heartbeat expired)."""


class QueueNotEmptyError(AsynqpyError):
    """The queue still holds tasks (remove it with ``force``, or empty it first)."""


class TaskStateError(AsynqpyError):
    """The action is not allowed in the task's current state (e.g. deleting an active task)."""


class LeaseLostError(AsynqpyError):
    """A worker tried to finish a task whose lease it no longer holds; the write was refused."""


class MalformedMessageError(AsynqpyError):
    """Data found in Redis is not a valid asynqpy message."""


class SignatureError(AsynqpyError):
    """A stored message's HMAC tag is missing or matches none of the worker's signing keys."""


class BlobError(AsynqpyError):
    """An offloaded payload or result cannot be stored or read from its blob store
    (docs/offload.md)."""


class BlobNotFoundError(BlobError):
    """A message refers to a blob its store does not have (deleted by hand, a wrong store or
    bucket): a worker archives the task at once with the reason, never retries it."""


class EncryptionError(AsynqpyError):
    """An encrypted stored value cannot be read: its key is not given (:class:`KeyNotFoundError`),
    or it does not decrypt (a wrong key, a tampered ciphertext: :class:`DecryptionError`). A worker
    archives the task with the reason; the CLI says it in one line (docs/encryption.md)."""


class KeyNotFoundError(EncryptionError):
    """The key id an encrypted value names is not in the reader's key ring (or is a tenant's key
    that was forgotten: ``asynqpy tenant forget``)."""


class DecryptionError(EncryptionError):
    """An encrypted value does not authenticate under its key: a wrong key under its id, or a
    ciphertext altered in Redis."""


class HandlerNotFoundError(AsynqpyError):
    """No handler is registered for a task's type."""


class TaskTimeoutError(AsynqpyError):
    """A handler ran past the task's timeout or deadline."""


class NotReplicatedError(AsynqpyError):
    """A write was applied by the Redis master, but fewer replicas than the client's
    ``wait_replicas`` confirmed it within ``wait_timeout`` (``WAIT``). The task exists on the
    master; it may be lost if the master fails before replicating it."""

    def __init__(self, message: str, acked: int = 0, result: object = None) -> None:
        super().__init__(message)
        self.acked = acked
        """How many replicas did confirm the write."""
        self.result = result
        """What the call returned on the master."""


class ResultError(PayloadError):
    """A handler's result cannot be stored (not msgpack-serializable, or too large). The handler's
    side effects already ran: a task failing with it is archived, never retried."""


class TaskFailedError(AsynqpyError):
    """The task a caller waits for ended archived (its retries ran out, it raised SkipRetry, or an
    operator archived it): it has no result. ``last_error`` is its last error text; ``task_id`` and
    ``queue`` name it."""

    def __init__(self, task_id: str, queue: str, last_error: str) -> None:
        super().__init__(f"task {task_id} (queue {queue}) failed: {last_error or 'archived'}")
        self.task_id, self.queue, self.last_error = task_id, queue, last_error


class RedisUnavailableError(AsynqpyError, RedisConnectionError):
    """Redis could not be reached, or the connection broke before the reply came (then the call may
    or may not have run: see "Calls sent again" in docs/internals-scripts.md). The redis-py error is the
    ``__cause__``. It is also a ``redis.exceptions.ConnectionError``, so code written against
    redis-py's errors keeps working."""

    transient = True


class RedisAuthError(AsynqpyError, RedisAuthenticationError):
    """Redis refused the credentials (a wrong password or ACL user, or none where one is needed):
    not an outage, nothing to retry. redis-py's ``AuthenticationError`` is the ``__cause__``; this
    is also one, so code written against redis-py's errors keeps working, and ``except
    AsynqpyError`` catches it."""


class RedisFullError(AsynqpyError):
    """Redis has reached its ``maxmemory`` and refuses new data: nothing of this call was stored
    (tasks already queued are untouched and workers keep draining them)."""


class SkipRetry(Exception):
    """Raise from a handler to archive the task at once, without retrying it."""


class RateLimited(Exception):
    """Raise from a handler when a quota it depends on is spent: the task waits ``retry_in``
    seconds, then runs again, without counting as a failure or using up a retry."""

    def __init__(self, retry_in: float, message: str = "") -> None:
        if isinstance(retry_in, bool) or not isinstance(retry_in, (int, float)) or not 0 <= retry_in < float("inf"):
            raise InvalidArgumentError(f"retry_in must be a number of seconds >= 0, got {retry_in!r}")
        super().__init__(message or f"rate limited: retry in {retry_in:g}s")
        self.retry_in = float(retry_in)


__all__ = [
    "AsynqpyError",
    "InvalidArgumentError",
    "PayloadError",
    "DuplicateTaskError",
    "TaskIdConflictError",
    "TaskNotFoundError",
    "QueueNotFoundError",
    "QueueNotEmptyError",
    "TaskStateError",
    "LeaseLostError",
    "MalformedMessageError",
    "SignatureError",
    "HandlerNotFoundError",
    "TaskTimeoutError",
    "NotReplicatedError",
    "RedisFullError",
    "RedisAuthError",
    "RedisUnavailableError",
    "ResultError",
    "RateLimited",
    "SkipRetry",
]


def _with_codes(cls: type[AsynqpyError]) -> list[type[AsynqpyError]]:
    found = [cls] if cls.reply_code is not None else []
    for sub in cls.__subclasses__():
        found += _with_codes(sub)
    return found


REPLY_ERRORS: dict[int, type[AsynqpyError]] = {c.reply_code: c for c in _with_codes(AsynqpyError)
                                              if c.reply_code is not None}
"""The reply-code -> exception table of the producer scripts (enqueue, enqueue_many, keyed ...),
made from each error class's :attr:`~AsynqpyError.reply_code`: the broker raises what it maps a
code to (:func:`reply_error`)."""


def reply_error(code: int, queue: str, id: str = "", count: int = 1) -> AsynqpyError | None:
    """The typed error of a script's refusal ``code`` (:data:`REPLY_ERRORS`), None for a code no
    error claims (a success, or a code the caller reads itself)."""
    cls = REPLY_ERRORS.get(code)
    return None if cls is None else cls.from_reply(queue, id, count)
