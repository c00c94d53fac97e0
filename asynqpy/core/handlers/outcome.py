"""What becomes of an attempt, decided without I/O (as asynq's ``handleFailedMessage``).

:func:`decide` takes the task's message, the kind of attempt (a plain task, a run of a targeted
task, a process input whose commit is planned), the error the handler raised (None: it succeeded),
the time and the server's :class:`Policy`, and returns an :class:`Outcome`: done, complete, commit,
snooze, retry (with its delay), archive, or the end of a targeted task's run. The worker turns the
outcome into its script call (``asynqpy.worker.writer``) and logs it; nothing here touches Redis,
asyncio or a clock.

The rules, in order:

- success: a run's end ("s") for a targeted run; the commit of its plan for a process input; a
  ``complete`` (the message with its result and completion time) when the task is kept
  (``retention_ms > 0``); else a plain ``done`` (batched with the other successes of its queue);
- :class:`~asynqpy.core.model.errors.RateLimited`: not a failure: a snooze of ``retry_in`` seconds (a
  targeted run is given back instead);
- any other error is a failure, recorded on the message (its text, time and traceback):
  ``SkipRetry``, ``ResultError``, no retries left, or an unknown type under
  ``unknown_type="archive"`` archive it; otherwise it is retried after the task's own
  ``retry_delay``, else the policy's (a broken policy falls back to the default one). A failed
  targeted run counts the failure; it archives the task at once (``final``) for the errors that
  would archive a plain task at once.
"""

from __future__ import annotations

import enum
import math
import traceback
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..model import codec
from ..model.codec import Message
from ..model.errors import (
    BlobNotFoundError,
    EncryptionError,
    HandlerNotFoundError,
    PayloadError,
    RateLimited,
    ResultError,
    SkipRetry,
    TaskTimeoutError,
)
from ..model.task import Task
from ..processes.model import Refused
from .retry import RetryDelayFunc, default_retry_delay
from .sandbox import SandboxedError

MAX_ERROR_TEXT = 2048
"""Characters of an error's text kept with the task (its last_error)."""
MAX_TRACEBACK = 4096
"""Characters of a failed attempt's traceback kept with the task (its innermost frames)."""


class Kind(enum.Enum):
    """What the attempt ran."""

    PLAIN = "plain"
    RUN = "run"  # a run of a targeted task (its id '<task id>|<worker>')
    PROCESS = "process"  # a process input whose commit is planned (``task._proc`` is a Plan)


class Action(enum.Enum):
    """The script an outcome is written with. ``what``: the outcome as the logs and the metrics
    name it (done, complete, snooze, retry, archive, or run: a targeted run's end)."""

    what: str
    over: bool | None  # True: it succeeded; False: it failed for good; None: it is not over

    DONE = "done"  # success, not kept: one batched done call per queue
    COMPLETE = "complete"  # success, kept for its retention
    COMMIT = "commit"  # a process input's success: proc_commit of its plan
    SNOOZE = "snooze"  # RateLimited: runs again after ``delay``, not a failure
    RETRY = "retry"  # failed: runs again after ``delay``
    ARCHIVE = "archive"  # failed for good
    RUN_DONE = "run_done"  # a targeted run succeeded (run_end "s")
    RUN_GIVEN_BACK = "run_given_back"  # a targeted run was rate limited (run_end "g")
    RUN_FAILED = "run_failed"  # a targeted run failed (run_end "f"; ``final``: archive the task now)


SUCCEEDED = frozenset({Action.DONE, Action.COMPLETE, Action.COMMIT, Action.RUN_DONE})
FAILED = frozenset({Action.RETRY, Action.ARCHIVE, Action.RUN_FAILED})

for _a in Action:  # attributes of each member, read for every task without a lookup
    _a.what = "complete" if _a is Action.COMMIT else "run" if _a.value.startswith("run_") else _a.value
    _a.over = True if _a in SUCCEEDED else False if _a in (Action.ARCHIVE, Action.RUN_FAILED) else None


@dataclass(frozen=True)
class Policy:
    """The server's settings the decision reads (``ServerOptions``' of the same names)."""

    retry_delay: RetryDelayFunc = default_retry_delay
    unknown_type: str = "retry"  # "archive": a task with no handler is archived at once


class Outcome(NamedTuple):
    """What becomes of an attempt. ``msg``: the message to write (a failure's carries its error,
    a retry's its count + 1, a kept success its result and completion time). ``delay``: seconds
    until a retry or a snooze runs. ``error``: the failure's text. ``why``: an archive's reason
    beyond the error (no retries left). ``final``: a failed targeted run archives its task now.
    ``mark_process``: an archived process input marks its process in error (not for a refused
    input). ``sign``: the message is re-signed (not for one that failed its check). ``result``:
    the success's value. ``policy_error``: the retry policy failed (the default one was used)."""

    action: Action
    msg: Message
    delay: float = 0.0
    error: str = ""
    why: str = ""
    final: bool = False
    mark_process: bool = True
    sign: bool = True
    result: Any = None
    policy_error: str = ""

    @property
    def what(self) -> str:
        """The outcome as the logs and the metrics name it (:class:`Action`)."""
        return self.action.what

    @property
    def ended(self) -> tuple[bool, Any] | None:
        """(completed, result or error text) for the callers waiting on the task, or None while it
        is not over (a retry, a snooze, a run given back)."""
        over = self.action.over
        return None if over is None else (True, self.result) if over else (False, self.msg.last_error)

    @property
    def will_retry(self) -> bool | None:
        """For the ``on_failure`` hook: whether the failed task runs again (None: not a failure)."""
        if self.action not in FAILED:
            return None
        return self.action is Action.RETRY or (self.action is Action.RUN_FAILED and not self.final)


def decide(msg: Message, kind: Kind, error: BaseException | None, now_ms: int, policy: Policy, *,
           result: Any = None, task: Task | None = None) -> Outcome:
    """The outcome of an attempt of the task ``msg`` (see the module's rules). ``result``: what a
    successful handler produced; ``task``: the task as the retry policy is given it (made from
    ``msg`` when None). Only the retry policy, user code, is called (what it raises is caught)."""
    if error is None:
        return _succeeded(msg, kind, now_ms, result)
    if isinstance(error, RateLimited):
        return Outcome(Action.RUN_GIVEN_BACK if kind is Kind.RUN else Action.SNOOZE, msg, delay=error.retry_in)
    text = describe(error)[:MAX_ERROR_TEXT]
    failed = msg.with_(last_error=text, last_failed_at_ms=now_ms, traceback=format_traceback(error))
    unknown = isinstance(error, HandlerNotFoundError)
    now = isinstance(error, (SkipRetry, ResultError, EncryptionError, BlobNotFoundError)) or (
        unknown and policy.unknown_type == "archive")
    if kind is Kind.RUN:  # another worker may take its place; the task counts the failure
        return Outcome(Action.RUN_FAILED, failed, error=text, final=now)
    if now or msg.retried >= msg.max_retry:
        why = "" if now or unknown else f" (no retries left: {msg.retried} of {msg.max_retry})"
        return Outcome(Action.ARCHIVE, failed, error=text, why=why, mark_process=not isinstance(error, Refused))
    delay, broken = retry_delay(msg, error, policy, task or Task(msg.type, _msg=msg))
    return Outcome(Action.RETRY, failed.with_(retried=msg.retried + 1), delay=delay, error=text, policy_error=broken)


def _succeeded(msg: Message, kind: Kind, now_ms: int, result: Any) -> Outcome:
    """The outcome of an attempt whose handler returned ``result``."""
    if kind is Kind.RUN:
        return Outcome(Action.RUN_DONE, msg, result=result)
    if kind is Kind.PROCESS:  # the input's message, with its completion when it is kept
        kept = msg.with_(completed_at_ms=now_ms, result=result) if msg.retention_ms > 0 else msg
        return Outcome(Action.COMMIT, kept, result=result)
    if msg.retention_ms > 0:
        return Outcome(Action.COMPLETE, msg.with_(completed_at_ms=now_ms, result=result), result=result)
    return Outcome(Action.DONE, msg, result=result)


def retry_delay(msg: Message, error: BaseException, policy: Policy, task: Task) -> tuple[float, str]:
    """(seconds until the next attempt, '' or the policy's failure): the task's own
    ``retry_delay``, else the policy's. A policy that fails or returns something other than a
    number >= 0 (NaN, inf, a negative number, a string) is replaced by the default policy; a delay
    longer than :data:`~asynqpy.core.spine.broker.MAX_DELAY_MS` is capped to it (by the broker)."""
    if msg.retry_delay_ms >= 0:
        return msg.retry_delay_ms / 1000, ""
    try:
        delay = policy.retry_delay(msg.retried, error, task)
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay < math.inf:
            raise ValueError(f"it returned {delay!r}, not a number of seconds >= 0")
        return float(delay), ""
    except Exception as exc:  # noqa: BLE001 - a broken policy must not lose the task
        return default_retry_delay(msg.retried, error, task), describe(exc)


def unrecorded(msg: Message, exc: BaseException, now_ms: int) -> Outcome:
    """The archive of an attempt whose outcome could not be decided or written (a result that
    cannot be stored, an exception whose text cannot be read): the task ends with the reason,
    never held with no outcome."""
    reason = f"asynqpy could not record this attempt's outcome: {describe(exc)}"
    return Outcome(Action.ARCHIVE, msg.with_(last_error=reason[:MAX_ERROR_TEXT], last_failed_at_ms=now_ms,
                                             result=None), error=reason)


def refused(raw: bytes, reason: str, now_ms: int) -> Outcome:
    """The archive, unrun and not re-signed, of stored data that failed its check (malformed, or
    not signed with the server's key). A process input refused so came from no trusted sender: its
    process is not marked in error (a forged signal cannot break a durable run)."""
    bad = codec.untrusted(raw, reason, now_ms)
    return Outcome(Action.ARCHIVE, bad, error=reason, sign=False, mark_process=False)


def check_result(result: Any, max_bytes: int) -> None:
    """Raise ResultError for a result that cannot be stored or sent (the task is archived with it,
    not retried: the attempt's side effects already ran)."""
    try:
        size = len(codec.encode_payload(result, "result"))
    except PayloadError as exc:
        raise ResultError(str(exc)) from None
    if size > max_bytes:
        raise ResultError(f"result is {size} bytes, over the server's max_result_bytes ({max_bytes})")


def quiet(error: BaseException) -> bool:
    """Whether a failure's traceback says nothing worth logging (no handler, a timeout, SkipRetry)."""
    return isinstance(error, (HandlerNotFoundError, TaskTimeoutError, SkipRetry))


def format_traceback(error: BaseException) -> str:
    """A failed attempt's traceback for the task's record: at most :data:`MAX_TRACEBACK`
    characters, keeping the end (the innermost frames and the error). A sandboxed handler's is
    the one from its child process."""
    remote = getattr(error, "remote_traceback", "") if isinstance(error, SandboxedError) else ""
    if remote:
        return remote if len(remote) <= MAX_TRACEBACK else "...\n" + remote[-MAX_TRACEBACK:]
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:  # noqa: BLE001 - a broken exception must not lose the task
        return ""
    return text if len(text) <= MAX_TRACEBACK else "...\n" + text[-MAX_TRACEBACK:]


def describe(error: BaseException) -> str:
    """``Type: text`` of an exception, even when its ``__str__`` itself fails (a sandboxed
    handler's exception: its own type and text, from the child process)."""
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the task
        text = "<the exception's text could not be read>"
    if isinstance(error, SandboxedError):
        return text
    return f"{type(error).__name__}: {text}"
