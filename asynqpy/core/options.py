"""Validation of enqueue options: turns what a user passes to ``enqueue`` into a message, a delay
and a uniqueness TTL, or raises :class:`InvalidArgumentError` with a clear message."""

from __future__ import annotations

import base64
import difflib
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from . import codec
from .codec import Message
from .errors import InvalidArgumentError, PayloadError
from .keys import validate_group, validate_name, validate_queue, validate_worker_name
from .workflow import MAX_PARENTS, policy_code

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
OPTIONS = frozenset({"queue", "max_retry", "timeout", "deadline", "process_at", "process_in", "unique", "task_id",
                     "retention", "retry_delay", "headers", "group", "unique_key", "throttle", "debounce",
                     "priority", "workers", "runs", "after", "on_parent_failure", "key"})
"""The names of the enqueue options."""


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


_GROUP, _WORKERS, _RUNS, _AFTER, _KEY = (codec._FIELDS.index(f) for f in ("group", "workers", "runs", "after", "key"))
MAX_KEY_LEN = 1024
"""Longest ``key=`` (characters)."""


class Prepared:
    """A validated task, ready for the broker: queue, id, message (``msg``, built on first use
    from ``values``), delay (> 0 = schedule), uniqueness TTL (0 = none), the encoded message, and
    whether the id was generated here (random: it cannot collide). ``mode``: how the lock is used:
    '' (unique, or no lock), 't' (throttle: ``unique_ttl`` is the window, the task is not unique)
    or 'd' (debounce: the lock's holder, if still scheduled, is replaced)."""

    __slots__ = ("queue", "id", "values", "_msg", "delay_ms", "unique_ttl", "data", "generated_id", "_end",
                 "mode", "policy")

    def __init__(self, queue: str, id: str, values: list[Any], delay_ms: int, unique_ttl: int, data: bytes,
                 generated_id: bool, msg: Message | None = None, mode: str = "") -> None:
        self.queue, self.id, self.values, self._msg = queue, id, values, msg
        self.delay_ms, self.unique_ttl, self.data, self.generated_id = delay_ms, unique_ttl, data, generated_id
        self._end = 0
        self.mode = mode
        self.policy = "c"  # on_parent_failure's code, for a task with after=

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
    def special(self) -> bool:
        """Whether the task is in an aggregation group or targeted (read from ``values``, without
        building the message: the batch path asks this of every task)."""
        v = self.values
        n = len(v)
        return bool((n > _GROUP and v[_GROUP]) or (n > _WORKERS and v[_WORKERS] is not None)
                    or (n > _RUNS and v[_RUNS] > 1) or (n > _AFTER and v[_AFTER] is not None)
                    or (n > _KEY and v[_KEY]))

    @property
    def msg(self) -> Message:
        if self._msg is None:
            self._msg = Message(*self.values)
        return self._msg


def new_task_id() -> str:
    """A random task id: 96 bits, 16 URL-safe characters (short ids keep Redis memory low)."""
    return base64.urlsafe_b64encode(os.urandom(12)).decode()


def new_task_ids(n: int) -> list[str]:
    """``n`` ids from one read of the system's random source."""
    raw = base64.urlsafe_b64encode(os.urandom(12 * n)).decode()
    return [raw[i:i + 16] for i in range(0, 16 * n, 16)]


def _is_text(s: str) -> bool:
    """Whether ``s`` can be stored: UTF-8 encodable (lone surrogates are not)."""
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_type(task_type: object) -> str:
    """``task_type`` if it is a valid task type (:func:`~asynqpy.core.keys.validate_name`, and not
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
            raise PayloadError(f"payload is {size} bytes, over the {max_payload_bytes}-byte limit")
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
        return Prepared(t.queue, id, values, t.delay_ms, t.unique_ttl, data, True, mode=t.mode)


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


def _targeting(workers: Sequence[str] | None, runs: int | None, group: str | None, process_at: Any,
               process_in: Any, debounce: Any, reply_to: str) -> list[str] | None:
    """Validate ``workers`` and ``runs``: the worker list to store (None = any worker)."""
    if workers is None and runs is None:
        return None
    names: list[str] | None = None
    if workers is not None:
        if isinstance(workers, str) or not isinstance(workers, Sequence) or not workers:
            raise InvalidArgumentError(f"workers must be a non-empty list of worker names, got {workers!r}")
        names = list(dict.fromkeys(validate_worker_name(w) for w in workers))
        if len(names) > MAX_WORKERS:
            raise InvalidArgumentError(f"workers names at most {MAX_WORKERS} workers, got {len(names)}")
    if runs is not None:
        if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
            raise InvalidArgumentError(f"runs must be an int from 1 to {MAX_RUNS}, got {runs!r}")
        if names is not None and runs > len(names):
            raise InvalidArgumentError(f"runs={runs} needs as many distinct workers, but workers names "
                                       f"{len(names)}: the task could never complete")
    if group is not None or process_at is not None or process_in is not None or debounce is not None:
        raise InvalidArgumentError("a targeted task (workers=, runs=) waits for its workers at once: not with "
                                   "group, process_at, process_in or debounce")
    if reply_to:
        raise InvalidArgumentError("a targeted task (workers=, runs=) has a result per run, not one: enqueue it "
                                   "and follow it with the Inspector or the event stream")
    return names


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
    headers: Mapping[str, str] | None = None,
    group: str | None = None,
    unique_key: str | None = None,
    throttle: Seconds | None = None,
    debounce: Seconds | None = None,
    priority: int = codec.DEFAULT_PRIORITY,
    workers: Sequence[str] | None = None,
    runs: int | None = None,
    after: Any = None,
    on_parent_failure: str = "cancel",
    key: str | None = None,
    reply_to: str = "",
    max_payload_bytes: int = 1 << 20,
    now: float | None = None,
) -> Prepared:
    """Validate enqueue arguments (see :meth:`asynqpy.Client.enqueue` for their meaning)."""
    check_type(task_type)
    validate_queue(queue)
    if group is not None:
        validate_group(group)
        if process_at is not None or process_in is not None:
            raise InvalidArgumentError("a grouped task waits in its group until it is aggregated: give group or "
                                       "process_at/process_in, not both")
        if reply_to:
            raise InvalidArgumentError("a grouped task has no result of its own (its group's aggregate has): "
                                       "enqueue it, do not call it")
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

    if isinstance(priority, bool) or not isinstance(priority, int) or not (
            codec.MIN_PRIORITY <= priority <= codec.MAX_PRIORITY):
        raise InvalidArgumentError(f"priority must be an int from {codec.MIN_PRIORITY} (lowest) to "
                                   f"{codec.MAX_PRIORITY} (highest), got {priority!r}")
    if priority != codec.DEFAULT_PRIORITY and group is not None:
        raise InvalidArgumentError("a grouped task has no priority of its own (its group's aggregate is "
                                   "enqueued with the default priority)")
    worker_list = _targeting(workers, runs, group, process_at, process_in, debounce, reply_to)
    if priority != codec.DEFAULT_PRIORITY and (workers is not None or (runs or 1) > 1):
        raise InvalidArgumentError("a targeted task (workers=, runs=) cannot have a priority: workers take it "
                                   "before any pending task")
    mode = ""
    if throttle is not None:
        if unique is not None or debounce is not None:
            raise InvalidArgumentError("throttle drops duplicates for a window: give throttle, unique or "
                                       "debounce, not several")
        window = _seconds("throttle", throttle)
        if window < 1:
            raise InvalidArgumentError(f"throttle must be at least 1 second, got {window!r}")
        mode = "t"
    if debounce is not None:
        if process_at is not None or process_in is not None or group is not None:
            raise InvalidArgumentError("debounce delays the task itself: give debounce, or process_at/"
                                       "process_in/group, not both")
        process_in = _seconds("debounce", debounce, allow_zero=False)
        if unique is None:
            unique = DEFAULT_UNIQUE_KEY_TTL
        mode = "d"
    if process_at is not None and process_in is not None:
        raise InvalidArgumentError("give process_at or process_in, not both")
    delay = 0.0
    if process_in is not None:
        delay = _seconds("process_in", process_in)
    elif process_at is not None:
        delay = max(0.0, _epoch("process_at", process_at) - now)

    if unique_key is not None:
        validate_name("unique_key", unique_key, 1024)
        if unique is None and throttle is None:
            unique = DEFAULT_UNIQUE_KEY_TTL
    unique_ttl = 0
    if throttle is not None:
        unique_ttl = math.ceil(_seconds("throttle", throttle))
    elif unique is not None:
        seconds = _seconds("unique", unique)
        if seconds < 1:
            raise InvalidArgumentError(f"unique must be at least 1 second, got {seconds!r}")
        unique_ttl = math.ceil(seconds)

    generated = task_id is None
    if task_id is None:
        task_id = new_task_id()
    else:
        validate_name("task_id", task_id, MAX_ID_LEN)

    retry_delay_ms = -1 if retry_delay is None else int(_seconds("retry_delay", retry_delay) * 1000)

    parents = parent_refs(after, queue)
    if parents is not None:
        if group is not None or unique_ttl or worker_list is not None or (runs or 1) > 1:
            raise InvalidArgumentError("after= cannot be combined with group, unique/unique_key/throttle/debounce "
                                       "or workers/runs")
    policy = policy_code(on_parent_failure)
    if key is not None:
        validate_name("key", key, MAX_KEY_LEN)
        if group is not None or worker_list is not None or (runs or 1) > 1 or parents is not None or mode:
            raise InvalidArgumentError("key= (serial execution) cannot be combined with group, workers/runs, after "
                                       "or throttle/debounce yet")

    msg = Message(
        type=task_type,
        payload=payload,
        enqueued_at_ms=int(now * 1000),
        max_retry=max_retry,
        timeout_ms=timeout_ms,
        deadline_ms=deadline_ms,
        retention_ms=int(_seconds("retention", retention) * 1000),
        unique=unique_ttl > 0 and mode != "t",
        retry_delay_ms=retry_delay_ms,
        headers=check_headers(headers),
        reply_to=reply_to,
        group=group or "",
        unique_key=unique_key or "",
        priority=priority,
        workers=worker_list,
        runs=runs or 1,
        after=parents,
        key=key or "",
    )
    values = list(msg.__dict__.values())
    p = Prepared(queue, task_id, values, int(delay * 1000), unique_ttl, _encode_checked(msg, max_payload_bytes),
                 generated, msg, mode)
    p.policy = policy
    return p


def parent_refs(after: Any, queue: str) -> list[list[str]] | None:
    """``after=`` as [queue, id] pairs: each item a TaskInfo (or anything with ``id`` and
    ``queue``), a ``(queue, id)`` pair, or an id (of a task in ``queue``, the child's)."""
    if after is None:
        return None
    if isinstance(after, (str, bytes)) or hasattr(after, "id") or not isinstance(after, Iterable):
        after = [after]
    out: list[list[str]] = []
    for item in after:
        if hasattr(item, "id") and hasattr(item, "queue"):
            q, id = item.queue, item.id
        elif isinstance(item, str):
            q, id = queue, item
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            q, id = item
        else:
            raise InvalidArgumentError(f"after= takes TaskInfo objects, task ids or (queue, id) pairs, got {item!r}")
        if not isinstance(id, str) or not id or len(id) > MAX_ID_LEN:
            raise InvalidArgumentError(f"after=: {id!r} is not a task id")
        validate_queue(q)
        if [q, id] not in out:
            out.append([q, id])
    if not out:
        raise InvalidArgumentError("after= names no parent (give at least one, or leave it out)")
    if len(out) > MAX_PARENTS:
        raise InvalidArgumentError(f"after=: at most {MAX_PARENTS} parents, got {len(out)}")
    return out
