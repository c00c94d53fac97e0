"""The enqueue options' values checked one by one (sans I/O): the limits (type, id, headers, times),
task ids, a task type, headers, durations and times, the unknown-option message, and
:class:`Prepared`, what :func:`~asynqpy.core.model.options.prepare` returns. The option table that
uses them, and ``prepare``, are :mod:`.options` (every name here is importable from there too)."""

from __future__ import annotations

import base64
import difflib
import math
import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..spine.keys import validate_name
from . import codec
from .codec import Message
from .errors import InvalidArgumentError, PayloadError
from .kinds import TaskKind

Seconds = int | float | timedelta
When = int | float | datetime


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()
"""Sentinel: the option was not given (``timeout=DEFAULT`` = the server's default timeout)."""

MAX_TYPE_LEN = 256
MAX_ID_LEN = 256
MAX_HEADERS = 64
"""Most headers a task may carry."""
MAX_HEADERS_BYTES = 8192
"""Largest total size of a task's headers (names and values, UTF-8)."""
MAX_SECONDS = 100 * 365 * 24 * 3600
"""Longest duration an option takes (100 years): every time it leads to stays a valid datetime."""
MAX_EPOCH = 253_402_300_799
"""Latest time an option takes (9999-12-31 23:59:59 UTC, the last one a datetime holds)."""
SYNONYMS = {
    # what other task queues call an option -> asynqpy's name
    "retries": "max_retry", "max_retries": "max_retry", "retry": "max_retry",
    "delay": "process_in", "countdown": "process_in", "defer_by": "process_in", "_defer_by": "process_in",
    "eta": "process_at", "at": "process_at", "defer_until": "process_at", "_defer_until": "process_at",
    "id": "task_id", "job_id": "task_id", "_job_id": "task_id", "key": "task_id",
    "expires": "deadline", "time_limit": "timeout", "ttl": "retention", "result_ttl": "retention",
    "keep_result": "retention", "unique_for": "unique", "workers": "concurrency", "prefetch": "fetch_batch",
}


def unknown_options(what: str, names: Iterable[str], known: Iterable[str]) -> str:
    """The message for unknown keyword options: each named, with the closest known one suggested
    (by spelling, or the name other task queues use)."""
    known = list(known)
    parts = []
    for name in sorted(map(str, names)):
        guess = SYNONYMS.get(name) if SYNONYMS.get(name) in known else None
        if guess is None:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            guess = close[0] if close else None
        parts.append(f"{name!r}" + (f" (did you mean {guess!r}?)" if guess else ""))
    return f"unknown {what}{'s' if len(parts) > 1 else ''}: {', '.join(parts)}"


MAX_KEY_LEN = 1024
"""Longest ``key=`` (characters)."""


class Prepared:
    """A validated task, ready for the broker: queue, id, message (``msg``, built on first use
    from ``values``), delay (> 0 = schedule), uniqueness TTL (0 = none), the encoded message, and
    whether the id was generated here (random: it cannot collide). ``mode``: how the lock is used:
    '' (unique, or no lock), 't' (throttle: ``unique_ttl`` is the window, the task is not unique)
    or 'd' (debounce: the lock's holder, if still scheduled, is replaced). ``kind``: what kind of
    task it is (:mod:`asynqpy.core.model.kinds`: the broker call that stores it).
    ``keep_finished``: a finished task holding the (caller-chosen) id is a conflict, not replaced:
    set for an idempotent process call (keyed tasks only: ``enqueue_keyed`` reads it)."""

    __slots__ = ("queue", "id", "values", "_msg", "delay_ms", "unique_ttl", "data", "generated_id", "_end",
                 "mode", "policy", "kind", "keep_finished")

    def __init__(self, queue: str, id: str, values: list[Any], delay_ms: int, unique_ttl: int, data: bytes,
                 generated_id: bool, msg: Message | None = None, mode: str = "",
                 kind: TaskKind = TaskKind.PLAIN) -> None:
        self.queue, self.id, self.values, self._msg = queue, id, values, msg
        self.delay_ms, self.unique_ttl, self.data, self.generated_id = delay_ms, unique_ttl, data, generated_id
        self._end = 0
        self.mode = mode
        self.kind = kind
        self.policy = "c"  # on_parent_failure's code, for a task with after=
        self.keep_finished = False

    @property
    def lock_digest(self) -> str:
        """The digest naming the task's lock ('' = none)."""
        return self.msg.lock_digest(force=self.mode == "t") if self.unique_ttl else ""

    @property
    def encoded_length(self) -> int:
        if not self._end:
            self._end = max(3, codec.encoded_length(self.values))
        return self._end

    @property
    def msg(self) -> Message:
        if self._msg is None:
            self._msg = codec.message_of(self.values)
        return self._msg


def new_task_id() -> str:
    """A random task id: 96 bits, 16 URL-safe characters (short ids keep Redis memory low), never
    starting with '-' (an id is a command-line argument: ``asynqpy task inspect ID`` took one
    starting with '-' for an option, 1 id in 64)."""
    return _no_dash(base64.urlsafe_b64encode(os.urandom(12)).decode())


def new_task_ids(n: int) -> list[str]:
    """``n`` ids from one read of the system's random source (as :func:`new_task_id`)."""
    raw = base64.urlsafe_b64encode(os.urandom(12 * n)).decode()
    return [_no_dash(raw[i:i + 16]) for i in range(0, 16 * n, 16)]


def _no_dash(id: str) -> str:
    return "_" + id[1:] if id[0] == "-" else id


def _is_text(s: str) -> bool:
    """Whether ``s`` can be stored: UTF-8 encodable (lone surrogates are not)."""
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_type(task_type: object) -> str:
    """``task_type`` if it is a valid task type (:func:`~asynqpy.core.spine.keys.validate_name`, and not
    only spaces), else InvalidArgumentError."""
    if not isinstance(task_type, str) or not task_type.strip():
        raise InvalidArgumentError("task type must be a non-empty string of valid (UTF-8 encodable) text")
    return validate_name("task type", task_type, MAX_TYPE_LEN)



def check_headers(headers: object) -> dict[str, str] | None:
    """Validate task headers: a mapping of str to str, at most :data:`MAX_HEADERS` entries and
    :data:`MAX_HEADERS_BYTES` in all. Returns a plain dict (None for none or empty)."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise InvalidArgumentError(f"headers must be a mapping of str to str, got {type(headers).__name__}")
    if len(headers) > MAX_HEADERS:
        raise InvalidArgumentError(f"headers: at most {MAX_HEADERS} entries, got {len(headers)}")
    size = 0
    for k, v in headers.items():
        if type(k) is not str or type(v) is not str or not k or not _is_text(k) or not _is_text(v):
            raise InvalidArgumentError(f"headers must map non-empty str names to str values (valid UTF-8 text), "
                                       f"got {k!r}: {v!r}"[:300])
        size += len(k.encode()) + len(v.encode())
    if size > MAX_HEADERS_BYTES:
        raise InvalidArgumentError(f"headers are {size} bytes, over the {MAX_HEADERS_BYTES}-byte limit")
    return dict(headers) or None


def _encode_checked(msg: Message, max_payload_bytes: int) -> bytes:
    data = codec.encode(msg)
    if len(data) > max_payload_bytes:  # the payload is part of the message: only then measure it
        size = len(codec.encode_payload(msg.payload))
        if size > max_payload_bytes:
            raise PayloadError(f"payload is {size} bytes, over the {max_payload_bytes}-byte limit: offload large "
                               "payloads to a blob store (Client(offload=FileBlobStore(...)), docs/offload.md)")
    return data


class Deriver:
    """Makes tasks with the same (already validated) options as ``template``: the fast path of
    enqueue with default options and of enqueue_many, which validates options once, not per task.
    Task types seen before are not checked again."""

    __slots__ = ("template", "max_payload_bytes", "_rest", "_types")

    def __init__(self, template: Prepared, max_payload_bytes: int) -> None:
        self.template = template
        self.max_payload_bytes = max_payload_bytes
        self._rest = template.values[3:template.encoded_length]  # options kept in the encoding
        self._types: set[str] = set()

    def __call__(self, task_type: str, payload: Any, id: str, now_ms: int) -> Prepared:
        """A task of ``task_type`` with ``payload`` and ``id``, enqueued at ``now_ms``."""
        if type(task_type) is not str or task_type not in self._types:
            check_type(task_type)
            if len(self._types) < 1000:
                self._types.add(task_type)
        values = [task_type, payload, now_ms, *self._rest]
        try:
            data: bytes = codec.packer().pack(values)  # type and payload are never trimmed
        except (TypeError, ValueError, OverflowError) as exc:
            raise PayloadError(f"payload is not msgpack-serializable: {exc}") from None
        if len(data) > self.max_payload_bytes:
            data = _encode_checked(Message(*values), self.max_payload_bytes)
        t = self.template
        return Prepared(t.queue, id, values, t.delay_ms, t.unique_ttl, data, True, mode=t.mode, kind=t.kind)


def _seconds(name: str, value: Seconds, *, allow_zero: bool = True) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgumentError(f"{name} must be a number of seconds or a timedelta, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidArgumentError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if value > MAX_SECONDS:
        raise InvalidArgumentError(f"{name} must be at most 100 years, got {value!r}")
    return float(value)


def _epoch(name: str, value: When) -> float:
    """Unix seconds of a datetime or a number of Unix seconds. A naive datetime is local time, as
    ``datetime.timestamp()`` takes it (``datetime.now() + timedelta(minutes=10)`` is ten minutes
    from now in any time zone); an aware one is taken as it is."""
    if isinstance(value, datetime):
        try:
            value = value.timestamp()
        except (OverflowError, OSError, ValueError):  # out of the platform's range
            raise InvalidArgumentError(f"{name} is out of range: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_EPOCH:
        raise InvalidArgumentError(f"{name} must be a datetime or Unix seconds from 1970 to 9999, got {value!r}")
    return float(value)


DEFAULT_UNIQUE_KEY_TTL = 24 * 3600
"""Seconds a ``unique_key`` holds when no ``unique`` TTL is given (it is released sooner when the
task finishes, is deleted or archived)."""


MAX_RUNS = 1000
MAX_WORKERS = 100
