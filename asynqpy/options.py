"""Validation of enqueue options: turns what a user passes to ``enqueue`` into a message, a delay
and a uniqueness TTL, or raises :class:`InvalidArgumentError` with a clear message."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Union

from . import codec
from .codec import Message
from .errors import InvalidArgumentError, PayloadError
from .keys import validate_queue

Seconds = Union[int, float, timedelta]
When = Union[int, float, datetime]


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()
"""Sentinel: the option was not given (``timeout=DEFAULT`` = the server's default timeout)."""

MAX_TYPE_LEN = 256
MAX_ID_LEN = 256


@dataclass(frozen=True)
class Prepared:
    """A validated task, ready for the broker."""

    queue: str
    id: str
    msg: Message
    delay_ms: int  # > 0 = schedule
    unique_ttl: int  # seconds, 0 = not unique


def _seconds(name: str, value: Seconds, *, allow_zero: bool = True) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgumentError(f"{name} must be a number of seconds or a timedelta, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidArgumentError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def _epoch(name: str, value: When) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgumentError(f"{name} must be a datetime or Unix seconds, got {value!r}")
    return float(value)


def prepare(
    task_type: str,
    payload: Any = None,
    *,
    queue: str = "default",
    max_retry: int = codec.DEFAULT_MAX_RETRY,
    timeout: Seconds | None = DEFAULT,
    deadline: When | None = None,
    process_at: When | None = None,
    process_in: Seconds | None = None,
    unique: Seconds | None = None,
    task_id: str | None = None,
    retention: Seconds = 0,
    retry_delay: Seconds | None = None,
    max_payload_bytes: int = 1 << 20,
    now: float | None = None,
) -> Prepared:
    """Validate enqueue arguments (see :meth:`asynqpy.Client.enqueue` for their meaning)."""
    if not isinstance(task_type, str) or not task_type.strip():
        raise InvalidArgumentError("task type must be a non-empty string")
    if len(task_type) > MAX_TYPE_LEN:
        raise InvalidArgumentError(f"task type is longer than {MAX_TYPE_LEN} characters")
    validate_queue(queue)
    if isinstance(max_retry, bool) or not isinstance(max_retry, int) or max_retry < 0:
        raise InvalidArgumentError(f"max_retry must be an int >= 0, got {max_retry!r}")
    now = time.time() if now is None else now

    if timeout is DEFAULT:
        timeout_ms = codec.SERVER_DEFAULT
    elif timeout is None:
        timeout_ms = 0
    else:
        timeout_ms = max(1, int(_seconds("timeout", timeout, allow_zero=False) * 1000))
    deadline_ms = 0 if deadline is None else int(_epoch("deadline", deadline) * 1000)

    if process_at is not None and process_in is not None:
        raise InvalidArgumentError("give process_at or process_in, not both")
    delay = 0.0
    if process_in is not None:
        delay = _seconds("process_in", process_in)
    elif process_at is not None:
        delay = max(0.0, _epoch("process_at", process_at) - now)

    unique_ttl = 0
    if unique is not None:
        seconds = _seconds("unique", unique)
        if seconds < 1:
            raise InvalidArgumentError(f"unique must be at least 1 second, got {seconds!r}")
        unique_ttl = math.ceil(seconds)

    if task_id is None:
        task_id = uuid.uuid4().hex
    elif not isinstance(task_id, str) or not task_id or len(task_id) > MAX_ID_LEN:
        raise InvalidArgumentError(f"task_id must be a non-empty string of at most {MAX_ID_LEN} characters")

    retry_delay_ms = -1 if retry_delay is None else int(_seconds("retry_delay", retry_delay) * 1000)
    size = len(codec.encode_payload(payload))
    if size > max_payload_bytes:
        raise PayloadError(f"payload is {size} bytes, over the {max_payload_bytes}-byte limit")

    msg = Message(
        type=task_type,
        payload=payload,
        enqueued_at_ms=int(now * 1000),
        max_retry=max_retry,
        timeout_ms=timeout_ms,
        deadline_ms=deadline_ms,
        retention_ms=int(_seconds("retention", retention) * 1000),
        unique=unique_ttl > 0,
        retry_delay_ms=retry_delay_ms,
    )
    return Prepared(queue, task_id, msg, int(delay * 1000), unique_ttl)
