"""Validation of enqueue options: turns what a user passes to ``enqueue`` into a message, a delay
and a uniqueness TTL, or raises :class:`InvalidArgumentError` with a clear message.

:data:`SPEC` is the option table, one :class:`Option` row per option (its check, the options it
cannot go with and the message then, its doc line and its ``asynqpy enqueue`` flag); :func:`prepare`
walks it, then decides the task's kind (:mod:`asynqpy.core.kinds`). ``Client.enqueue``'s docstring
(:func:`enqueue_doc`) and docs/options.md (:func:`options_table`, :func:`kinds_table`) are made
from it."""

from __future__ import annotations

import base64
import difflib
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from . import codec
from .codec import Message
from .deploy import encode_version
from .errors import InvalidArgumentError, PayloadError
from .keys import refuse_dot_segment, validate_group, validate_name, validate_queue, validate_worker_name
from .kinds import ROUTES, TaskKind, decide
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
    task it is (:mod:`asynqpy.core.kinds`: the broker call that stores it)."""

    __slots__ = ("queue", "id", "values", "_msg", "delay_ms", "unique_ttl", "data", "generated_id", "_end",
                 "mode", "policy", "kind")

    def __init__(self, queue: str, id: str, values: list[Any], delay_ms: int, unique_ttl: int, data: bytes,
                 generated_id: bool, msg: Message | None = None, mode: str = "",
                 kind: TaskKind = TaskKind.PLAIN) -> None:
        self.queue, self.id, self.values, self._msg = queue, id, values, msg
        self.delay_ms, self.unique_ttl, self.data, self.generated_id = delay_ms, unique_ttl, data, generated_id
        self._end = 0
        self.mode = mode
        self.kind = kind
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

# -- the option table ----------------------------------------------------------------------------
# One row per enqueue option: its checks, its conflicts, its doc line and its command-line flag.
# prepare() walks it; Client.enqueue's docstring, docs/options.md and the `asynqpy enqueue` flags
# are built from it or checked against it (tests/test_option_table.py).

Check = Callable[[Any, dict[str, Any]], Any]
"""An option's check: (value given, the options checked before it, normalized) -> the value
normalized, or InvalidArgumentError."""

CALLED = "reply_to"
"""The name conflicts give to ``Client.call`` (a task whose caller waits for its result)."""

_GROUP_TIMING = ("a grouped task waits in its group until it is aggregated: give group or process_at/process_in, "
                 "not both")
_TARGETED = ("a targeted task (workers=, runs=) waits for its workers at once: not with group, process_at, "
             "process_in or debounce")
_TARGETED_CALL = ("a targeted task (workers=, runs=) has a result per run, not one: enqueue it and follow it with "
                  "the Inspector or the event stream")
_TARGETED_PRIORITY = ("a targeted task (workers=, runs=) cannot have a priority: workers take it before any "
                      "pending task")
_THROTTLE = "throttle drops duplicates for a window: give throttle, unique or debounce, not several"
_DEBOUNCE = "debounce delays the task itself: give debounce, or process_at/process_in/group, not both"
_AFTER = "after= cannot be combined with group, unique/unique_key/throttle/debounce or workers/runs"
_TENANT = ("tenant= cannot be combined with group (an aggregate mixes members) or workers/runs (runs are joined, "
           "not taken in turns)")
MAX_TENANT_BYTES = 64
"""The longest tenant name, in bytes of UTF-8."""
_KEY = "key= (serial execution) cannot be combined with group, workers/runs, after or throttle/debounce yet"


@dataclass(frozen=True)
class Option:
    """One enqueue option. ``type`` and ``default`` as the docs show them; ``doc``: its meaning,
    one line; ``flag``: its ``asynqpy enqueue`` flag (None: not on the command line); ``check``:
    validates and normalizes a given value; ``unset``: the normalized value when it is not given;
    ``neutral``: normalized values that do not put it in effect (for conflicts); ``conflicts``:
    other option -> the message when both are in effect (checked in table order);
    ``client_only``: taken by ``Client.enqueue`` itself, not stored with the task; ``example``: a
    valid value (tests/test_option_table.py tries every pair of options with it)."""

    name: str
    type: str
    default: str
    doc: str
    flag: str | None
    check: Check
    unset: Any = None
    neutral: tuple[Any, ...] = (None,)
    conflicts: Mapping[str, str] = field(default_factory=dict)
    client_only: bool = False
    example: Any = None


def _optional(check: Callable[[Any], Any]) -> Check:
    """A check that lets None through (the option's "none")."""
    return lambda v, got: None if v is None else check(v)


def _int_from(name: str, low: int, high: int | None, shown: str) -> Check:
    def check(v: Any, got: dict[str, Any]) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
            raise InvalidArgumentError(f"{name} must be {shown}, got {v!r}")
        return v
    return check


def _timeout_ms(v: Any, got: dict[str, Any]) -> int:
    if v is DEFAULT:
        return codec.SERVER_DEFAULT
    return 0 if v is None else max(1, int(_seconds("timeout", v, allow_zero=False) * 1000))


def _at_least_a_second(name: str) -> Check:
    def check(v: Any, got: dict[str, Any]) -> float | None:
        if v is None:
            return None
        seconds = _seconds(name, v)
        if seconds < 1:
            raise InvalidArgumentError(f"{name} must be at least 1 second, got {seconds!r}")
        return seconds
    return check


def _workers(v: Any, got: dict[str, Any]) -> list[str] | None:
    if v is None:
        return None
    if isinstance(v, str) or not isinstance(v, Sequence) or not v:
        raise InvalidArgumentError(f"workers must be a non-empty list of worker names, got {v!r}")
    names = list(dict.fromkeys(validate_worker_name(w) for w in v))
    if len(names) > MAX_WORKERS:
        raise InvalidArgumentError(f"workers names at most {MAX_WORKERS} workers, got {len(names)}")
    return names


def _runs(v: Any, got: dict[str, Any]) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_RUNS:
        raise InvalidArgumentError(f"runs must be an int from 1 to {MAX_RUNS}, got {v!r}")
    names = got["workers"]
    if names is not None and v > len(names):
        raise InvalidArgumentError(f"runs={v} needs as many distinct workers, but workers names "
                                   f"{len(names)}: the task could never complete")
    return v


def _named(name: str, max_len: int) -> Check:
    return _optional(lambda v: validate_name(name, v, max_len))


def _bool(name: str) -> Check:
    def check(v: Any, got: dict[str, Any]) -> bool:
        if not isinstance(v, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {v!r}")
        return v
    return check


def validate_tenant(v: Any) -> str:
    """A tenant name: 1 to :data:`MAX_TENANT_BYTES` bytes of UTF-8 with no control character below
    0x20 (the bytes 0 and 1 delimit a tenant's range in the queue's tenant zset). Raises
    InvalidArgumentError otherwise."""
    if not isinstance(v, str):
        raise InvalidArgumentError(f"tenant must be a string, got {type(v).__name__}")
    try:
        raw = v.encode()
    except UnicodeEncodeError:
        raise InvalidArgumentError("tenant must be valid UTF-8 text (no lone surrogates)") from None
    if not 1 <= len(raw) <= MAX_TENANT_BYTES or min(raw) < 0x20:
        raise InvalidArgumentError(f"tenant must be 1 to {MAX_TENANT_BYTES} bytes of UTF-8 with no control "
                                   f"character, got {v!r}")
    return v


def validate_new_tenant(v: Any) -> str:
    """A tenant name given to a task (``tenant=``): :func:`validate_tenant`, and not ``.`` or ``..``
    (:func:`~asynqpy.core.keys.refuse_dot_segment`: the web console names a tenant in a URL's path)."""
    return refuse_dot_segment("tenant", validate_tenant(v))


def _task_id(v: Any, got: dict[str, Any]) -> str | None:
    return None if v is None else validate_name("task_id", v, MAX_ID_LEN)


def _on_conflict(v: Any, got: dict[str, Any]) -> str:
    if v not in ("raise", "return"):
        raise InvalidArgumentError(f"on_conflict must be 'raise' or 'return', got {v!r}")
    return str(v)


_TARGET_CONFLICTS = {"group": _TARGETED, "process_at": _TARGETED, "process_in": _TARGETED, "debounce": _TARGETED,
                     CALLED: _TARGETED_CALL, "priority": _TARGETED_PRIORITY}

SPEC: tuple[Option, ...] = (
    Option("queue", "str", '"default"', "queue name: 1-128 characters from `A-Z a-z 0-9 _ . : -`", "--queue",
           lambda v, got: validate_queue(v), "default", example="critical"),
    Option("group", "str", "none", "wait in this aggregation group until a server aggregates it (no result of "
           "its own)", "--group", _optional(validate_group),
           conflicts={"process_at": _GROUP_TIMING, "process_in": _GROUP_TIMING,
                      CALLED: "a grouped task has no result of its own (its group's aggregate has): enqueue it, "
                              "do not call it",
                      "priority": "a grouped task has no priority of its own (its group's aggregate is enqueued "
                                  "with the default priority)"}, example="g"),
    Option("max_retry", "int", "25", "retries after the first attempt before the task is archived", "--max-retry",
           _int_from("max_retry", 0, None, "an int >= 0"), codec.DEFAULT_MAX_RETRY, example=3),
    Option("timeout", "seconds or None", "server's `default_timeout`", "seconds per attempt; `None` = no limit",
           "--timeout", _timeout_ms, codec.SERVER_DEFAULT, example=30),
    Option("deadline", "time", "none", "absolute end (datetime or Unix seconds) for every attempt", None,
           lambda v, got: 0 if v is None else int(_epoch("deadline", v) * 1000), 0, example=4e9),
    Option("priority", "int", "5", "0 (lowest) to 9 (highest): strict order within the queue, FIFO within a "
           "priority", "--priority",
           _int_from("priority", codec.MIN_PRIORITY, codec.MAX_PRIORITY,
                     f"an int from {codec.MIN_PRIORITY} (lowest) to {codec.MAX_PRIORITY} (highest)"),
           codec.DEFAULT_PRIORITY, neutral=(codec.DEFAULT_PRIORITY,), example=9),
    Option("workers", "list[str]", "any", "names of the workers allowed to run it (`Server(name=)`, `--name`): "
           "a targeted task", "--workers", _workers, conflicts=_TARGET_CONFLICTS, example=["w1", "w2"]),
    Option("runs", "int", "1", "how many distinct workers must each run it successfully: a targeted task",
           "--runs", _runs, neutral=(None, 1), conflicts=_TARGET_CONFLICTS, example=2),
    Option("throttle", "seconds", "none", "drop the task (`ThrottledError`) if one with the same key (`unique_key`, "
           "else type + payload) was enqueued less than this long ago", "--throttle",
           _at_least_a_second("throttle"), conflicts={"unique": _THROTTLE, "debounce": _THROTTLE}, example=10),
    Option("debounce", "seconds", "none", "run this long after the last enqueue with the same key; a task with "
           "the key still waiting is replaced (`TaskInfo.replaced`)", "--debounce",
           _optional(lambda v: _seconds("debounce", v, allow_zero=False)),
           conflicts={"process_at": _DEBOUNCE, "process_in": _DEBOUNCE, "group": _DEBOUNCE}, example=5),
    Option("process_at", "time", "now", "run at this time (datetime, a naive one being local time, or Unix "
           "seconds)", "--at", _optional(lambda v: _epoch("process_at", v)),
           conflicts={"process_in": "give process_at or process_in, not both"}, example=4e9),
    Option("process_in", "seconds", "now", "run after this delay (seconds or timedelta; negative is an error)",
           "--in", _optional(lambda v: _seconds("process_in", v)), example=60),
    Option("unique_key", "str", "none", "unique by this key (any text up to 1024 characters: `\"order:42\"`) "
           "instead of type + payload, for `unique` seconds or 24 h", "--unique-key", _named("unique_key", 1024),
           example="k:1"),
    Option("unique", "seconds", "none", "(>= 1) reject another task with the same queue + type + payload "
           "(`DuplicateTaskError`) while this one is live, for at most this long", "--unique",
           _at_least_a_second("unique"), example=60),
    Option("task_id", "str", "random 16-character id", "your own id; a live task with the same id gives "
           "`TaskIdConflictError`", "--task-id", _task_id, example="id-1"),
    Option("retry_delay", "seconds", "server's policy", "fixed seconds between this task's retries", None,
           lambda v, got: -1 if v is None else int(_seconds("retry_delay", v) * 1000), -1, example=5),
    Option("after", "parents", "none", "parents (TaskInfo, ids or `(queue, id)`): wait until they completed, "
           "read their results as `task.parent_results`", "--after",
           lambda v, got: parent_refs(v, got["queue"]),
           conflicts=dict.fromkeys(("group", "unique", "unique_key", "throttle", "debounce", "workers", "runs"),
                                   _AFTER), example=["p1"]),
    Option("on_parent_failure", "str", '"cancel"', 'with `after`: `"cancel"`, `"run"` or `"ignore"` when a '
           "parent is archived or deleted", "--on-parent-failure", lambda v, got: policy_code(v), "c",
           neutral=("c",), example="run"),
    Option("key", "str", "none", "tasks of the queue with this key run one at a time, in enqueue order",
           "--key", _named("key", MAX_KEY_LEN),
           conflicts=dict.fromkeys(("group", "workers", "runs", "after", "throttle", "debounce"), _KEY), example="k"),
    Option("retry_front", "bool", "False", "a retry goes to the front of the queue's pending tasks (of its "
           "priority), not the back: a failed task runs again before the backlog", None, _bool("retry_front"),
           False, neutral=(False,), example=True,
           conflicts=dict.fromkeys(("group", "workers", "runs"), "retry_front applies to a task that runs and is "
                                   "retried itself: not to a grouped task (its aggregate runs) or a targeted "
                                   "one (its runs are retried on their workers)")),
    Option("tenant", "str", "none", "the tenant the task belongs to: the queue hands its pending tasks out "
           "round-robin across tenants with work (FIFO and priority within each; tasks without a tenant take "
           "turns as one tenant). See docs/tenants.md", "--tenant", _optional(validate_new_tenant),
           example="acme", conflicts=dict.fromkeys(("group", "workers", "runs"), _TENANT)),
    Option("min_worker_version", "str", "none", "only workers of this version or newer (`Server(version=)`, "
           "`--worker-version`) run it: `\"MAJOR[.MINOR[.PATCH]]\"`; an older worker sets it aside for them. "
           "See docs/deploy.md", "--min-worker-version", lambda v, got: 0 if v is None else encode_version(v), 0,
           neutral=(0,), example="2.1",
           conflicts=dict.fromkeys(("group", "workers", "runs"), "min_worker_version applies to a task that runs "
                                   "as it is: not to a grouped task (its aggregate runs) or a targeted one (its "
                                   "runs are chosen by worker name)")),
    Option("retention", "seconds", "0", "seconds to keep the task as completed, with its result, after success",
           "--retention", lambda v, got: int(_seconds("retention", v) * 1000), 0, example=60),
    Option("headers", "dict[str, str]", "none", "handed to the handler as `task.headers` (at most 64 entries, "
           "8 KiB; covered by signing)", None, lambda v, got: check_headers(v), example={"h": "v"}),
    Option("on_conflict", "str", '"raise"', '`enqueue` only: `"return"` gives back the live task holding the '
           "`task_id` or unique key instead of raising", None, _on_conflict, "raise", client_only=True,
           example="return"),
)
"""The enqueue options, in the order prepare checks them."""

OPTION = {o.name: o for o in SPEC}
"""The option table by name."""
OPTIONS = frozenset(o.name for o in SPEC if not o.client_only)
"""The names of the enqueue options a task stores (``prepare`` takes them)."""
_TASK_OPTIONS = tuple(o for o in SPEC if not o.client_only)
_UNSET = {o.name: o.unset for o in _TASK_OPTIONS}
_CONFLICTING = tuple(o for o in _TASK_OPTIONS if o.conflicts)
_ORDER = {o.name: i for i, o in enumerate(SPEC)}
_CONFLICT_NAMES = frozenset({n for o in _CONFLICTING for n in (o.name, *o.conflicts)}
                            | {n for route in ROUTES.values() for n in route.refuses})
"""The options that take part in a conflict or a kind's refusal (no other is looked at for one)."""


def conflicting(name: str) -> frozenset[str]:
    """The options that cannot be in effect with ``name`` (both ways)."""
    return frozenset({*OPTION[name].conflicts, *(o.name for o in SPEC if name in o.conflicts)} - {CALLED})


def allowed(kind: TaskKind) -> frozenset[str]:
    """The options a task of ``kind`` takes: its route's ``takes`` if it says, else those no
    option making it conflicts with in every case, less the ones its route refuses."""
    route = ROUTES[kind]
    if route.takes is not None:
        return route.takes
    refused: set[str] = set.intersection(*(set(conflicting(n)) for n in route.by)) if route.by else set()
    return OPTIONS - refused - route.refuses


def _check_values(options: Mapping[str, Any]) -> dict[str, Any]:
    """Every option checked and normalized, in table order (an option not given is its ``unset``)."""
    unknown = options.keys() - OPTIONS
    if unknown:
        raise InvalidArgumentError(unknown_options("enqueue option", unknown, sorted(OPTIONS)))
    got = dict(_UNSET)
    for name in sorted(options, key=_ORDER.__getitem__):
        got[name] = OPTION[name].check(options[name], got)
    return got


def _check_conflicts(got: dict[str, Any], given: Iterable[str], called: bool) -> set[str]:
    """The options in effect; InvalidArgumentError for the first two that conflict (table order)."""
    effect = {n for n in given if n in _CONFLICT_NAMES and got[n] not in OPTION[n].neutral}
    if called:
        effect.add(CALLED)
    if len(effect) < 2:
        return effect
    for o in _CONFLICTING:
        if o.name in effect:
            for other, message in o.conflicts.items():
                if other in effect:
                    raise InvalidArgumentError(message)
    return effect


def _lock(got: dict[str, Any]) -> tuple[int, str]:
    """The uniqueness TTL (0 = none) and how the lock is used ('' unique, 't' throttle, 'd' debounce)."""
    if got["throttle"] is not None:
        return math.ceil(got["throttle"]), "t"
    mode = "" if got["debounce"] is None else "d"
    if got["unique"] is not None:
        return math.ceil(got["unique"]), mode
    if mode or got["unique_key"] is not None:
        return DEFAULT_UNIQUE_KEY_TTL, mode
    return 0, ""


def _delay(got: dict[str, Any], now: float) -> float:
    """Seconds until the task is due (0: now)."""
    for name in ("debounce", "process_in"):
        if got[name] is not None:
            return float(got[name])
    return 0.0 if got["process_at"] is None else max(0.0, got["process_at"] - now)


def prepare(task_type: str, payload: Any = None, *, reply_to: str = "", max_payload_bytes: int = 1 << 20,
            now: float | None = None, **options: Any) -> Prepared:
    """Validate enqueue arguments (the options of :data:`SPEC`; see :meth:`asynqpy.Client.enqueue`
    for their meaning): each value by its row's check, then their conflicts, then the kind of the
    task (:func:`asynqpy.core.kinds.decide`) and what that kind refuses."""
    check_type(task_type)
    got = _check_values(options)
    effect = _check_conflicts(got, options, bool(reply_to))
    now = time.time() if now is None else now
    unique_ttl, mode = _lock(got)
    delay_ms = int(_delay(got, now) * 1000)
    msg = Message(
        type=task_type, payload=payload, enqueued_at_ms=int(now * 1000), max_retry=got["max_retry"],
        timeout_ms=got["timeout"], deadline_ms=got["deadline"], retention_ms=got["retention"],
        unique=unique_ttl > 0 and mode != "t", retry_delay_ms=got["retry_delay"], headers=got["headers"],
        reply_to=reply_to, group=got["group"] or "", unique_key=got["unique_key"] or "", priority=got["priority"],
        workers=got["workers"], runs=got["runs"] or 1, after=got["after"], key=got["key"] or "",
        retry_front=got["retry_front"], tenant=got["tenant"] or "", min_version=got["min_worker_version"],
    )
    kind = decide(task_type, waiting=msg.after is not None, delay_ms=delay_ms, debounced=mode == "d",
                  grouped=bool(msg.group), key=msg.key, targeted=msg.workers is not None or msg.runs > 1)
    if effect & ROUTES[kind].refuses:
        raise InvalidArgumentError(ROUTES[kind].refusal)
    task_id = got["task_id"]
    p = Prepared(got["queue"], task_id or new_task_id(), list(msg.__dict__.values()), delay_ms, unique_ttl,
                 _encode_checked(msg, max_payload_bytes), task_id is None, msg, mode, kind)
    p.policy = got["on_parent_failure"]
    return p


def _parent(item: Any, queue: str) -> list[str]:
    """One item of ``after=`` as [queue, id]."""
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
    return [validate_queue(q), id]


def parent_refs(after: Any, queue: str) -> list[list[str]] | None:
    """``after=`` as [queue, id] pairs: each item a TaskInfo (or anything with ``id`` and
    ``queue``), a ``(queue, id)`` pair, or an id (of a task in ``queue``, the child's)."""
    if after is None:
        return None
    if isinstance(after, (str, bytes)) or hasattr(after, "id") or not isinstance(after, Iterable):
        after = [after]
    out: list[list[str]] = []
    for item in after:
        ref = _parent(item, queue)
        if ref not in out:
            out.append(ref)
    if not out:
        raise InvalidArgumentError("after= names no parent (give at least one, or leave it out)")
    if len(out) > MAX_PARENTS:
        raise InvalidArgumentError(f"after=: at most {MAX_PARENTS} parents, got {len(out)}")
    return out


# -- what the option table gives: Client.enqueue's docstring and docs/options.md --------------------


def _rst(text: str) -> str:
    """Markdown code spans as reStructuredText literals."""
    return re.sub(r"`([^`]+)`", r"``\1``", text)


def enqueue_doc() -> str:
    """``Client.enqueue``'s docstring, its options from :data:`SPEC`."""
    rows = "\n".join(f"        - ``{o.name}`` ({o.type}; default {_rst(o.default)}): {_rst(o.doc)}." for o in SPEC)
    return f"""Enqueue a task; returns its :class:`TaskInfo`.

        ``payload``: bytes or any msgpack-serializable value. Options (keyword-only; the table
        of every option, with what each cannot go with, is docs/options.md):

{rows}

        Raises InvalidArgumentError / PayloadError for bad input, DuplicateTaskError for a
        duplicate unique task (ThrottledError, a subclass, for a throttled one), TaskIdConflictError
        when a live task has ``task_id``."""


def options_table() -> str:
    """The Markdown table of the options (docs/options.md)."""
    lines = ["| option | type | default | `asynqpy enqueue` | cannot go with | meaning |", "|---|---|---|---|---|---|"]
    for o in SPEC:
        others = ", ".join(f"`{n}`" for n in sorted(conflicting(o.name))) if o.name in OPTIONS else ""
        flag = f"`{o.flag}`" if o.flag else ""
        lines.append(f"| `{o.name}` | {o.type} | {o.default} | {flag} | {others} | {o.doc} |")
    return "\n".join(lines)


def kinds_table() -> str:
    """The Markdown table of the task kinds (docs/options.md)."""
    lines = ["| kind | made by | stored by | first state | refuses |", "|---|---|---|---|---|"]
    for kind, route in ROUTES.items():
        by = ", ".join(f"`{n}`" for n in route.by) or "none of those"
        refused = ", ".join(f"`{n}`" for n in sorted(OPTIONS - allowed(kind)))
        lines.append(f"| {kind.value} | {by} | `Broker.{route.call}` | {route.state.value} | {refused} |")
    return "\n".join(lines)
