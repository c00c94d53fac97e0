"""ServerOptions: every setting of a server, validated (the worker loops read them).

:data:`SETTINGS` is the settings table, one :class:`Setting` row per field (its check, its doc
line, its ``asynqpy worker`` flag and that flag's environment variable), like the enqueue option
table (core/model/options.py SPEC): :meth:`ServerOptions.validate` walks it, the worker command's flags
(cli/main.py) and docs/workers.md's settings table (:func:`settings_table`) are made from it."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from functools import cached_property
from typing import Any, Literal, cast

from ..core.cron.entries import Entry
from ..core.deploy.versions import encode_version
from ..core.handlers.retry import RetryDelayFunc, default_retry_delay
from ..core.model.errors import InvalidArgumentError
from ..core.model.options import MAX_SECONDS
from ..core.model.task import Task
from ..core.spine.keys import validate_name, validate_queue_or_pattern, validate_worker_name

FailureHook = Callable[[Task, BaseException, bool], Any]
"""``on_failure(task, error, will_retry)``: called after every failed attempt (a plain function
runs in the thread pool, an ``async def`` on the event loop); what it raises is logged."""

MAX_FETCH_BATCH = 1000
"""Most tasks one dequeue call may take (bulk script calls stay bounded)."""


class Check:
    """A setting's check: ``check(name, value)`` returns the value to keep (normalized: a list of
    task types becomes a frozenset) or raises InvalidArgumentError. ``type``: the type as the docs
    show it. The subclasses below also tell the ``asynqpy worker`` flag its kind and bounds."""

    type = "any"

    def __call__(self, name: str, value: Any) -> Any:
        return value


class Int(Check):
    """An int from ``low`` to ``high`` (None: no upper bound)."""

    type = "int"

    def __init__(self, low: int, high: int | None = None) -> None:
        self.low, self.high = low, high

    def __call__(self, name: str, value: Any) -> Any:
        low, high = self.low, self.high
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"from {low} to {high}"
            raise InvalidArgumentError(f"{name} must be an int {bounds}, got {value!r}")
        return value


class Seconds(Check):
    """A number of seconds > 0 (``zero_ok``: >= 0), at most 100 years."""

    type = "seconds"

    def __init__(self, *, zero_ok: bool = False) -> None:
        self.zero_ok = zero_ok

    def __call__(self, name: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 <= value <= MAX_SECONDS and (self.zero_ok or value > 0)
        ):
            raise InvalidArgumentError(f"{name} must be a number of seconds {'>= 0' if self.zero_ok else '> 0'} "
                                       f"(at most 100 years), got {value!r}")
        return value


class Bool(Check):
    """True or False."""

    type = "bool"

    def __call__(self, name: str, value: Any) -> Any:
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be a bool, got {value!r}")
        return value


class Choice(Check):
    """One of ``choices`` (strings)."""

    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.type = " or ".join(f'`"{c}"`' for c in choices)

    def __call__(self, name: str, value: Any) -> Any:
        if value not in self.choices:
            raise InvalidArgumentError(f"{name} must be {' or '.join(map(repr, self.choices))}")
        return value


class Text(Check):
    """A string, checked by ``check(value)`` (which raises InvalidArgumentError), else non-empty."""

    type = "str"

    def __init__(self, check: Callable[[Any], Any] | None = None, what: str = "a non-empty string") -> None:
        self.check, self.what = check, what

    def __call__(self, name: str, value: Any) -> Any:
        if self.check is not None:
            self.check(value)
        elif not isinstance(value, str) or not value:
            raise InvalidArgumentError(f"{name} must be {self.what}, got {value!r}")
        return value


class OrNone(Check):
    """None (the setting's "none"), or what ``inner`` takes."""

    def __init__(self, inner: Check) -> None:
        self.inner = inner
        self.type = f"{inner.type} or None"

    def __call__(self, name: str, value: Any) -> Any:
        return None if value is None else self.inner(name, value)


class Custom(Check):
    """A check of its own: ``check(value)`` returns the value to keep or raises."""

    def __init__(self, type: str, check: Callable[[Any], Any]) -> None:
        self.type, self.check = type, check

    def __call__(self, name: str, value: Any) -> Any:
        return self.check(value)


def _function(message: str) -> Check:
    def check(value: Any) -> Any:
        if not callable(value):
            raise InvalidArgumentError(message)
        return value
    return Custom("function", check)


def _queues(queues: Any) -> Any:
    if not isinstance(queues, Mapping) or not queues:
        raise InvalidArgumentError("a server needs at least one queue (a mapping name -> weight)")
    for name, weight in queues.items():
        validate_queue_or_pattern(name)
        Int(1)(f"queue {name!r} weight", weight)
    return queues


def _capture_logs(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, frozenset, set)) \
            or not all(isinstance(t, str) and t for t in value):
        raise InvalidArgumentError(f"capture_logs must be a bool or a list of task types, got {value!r}")
    return frozenset(value)


def _hooks(name: str) -> Check:
    def check(hooks: Any) -> Any:
        if isinstance(hooks, (str, bytes)) or not isinstance(hooks, Sequence) or not all(map(callable, hooks)):
            raise InvalidArgumentError(f"{name} must be a list of functions, got {hooks!r}")
        return hooks
    return Custom("list of functions", check)


def _entries(entries: Any) -> Any:
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence) \
            or not all(isinstance(e, Entry) for e in entries):
        raise InvalidArgumentError("scheduler_entries must be a list of entries (Scheduler.register / "
                                   f"asynqpy.core.cron.entries.make_entry), got {entries!r}")
    return entries


def _owner(owner: Any) -> Any:
    return validate_name("scheduler_owner", owner, 200)


def _group(part: int) -> Check:
    """Checks one of the aggregation settings (worker/aggregator.check_params; the others as their defaults)."""
    def check(value: Any) -> Any:
        from .aggregator import check_params

        params: list[Any] = [None, 60.0, None, 1]
        params[part] = value
        check_params(*params)
        return value
    return Custom(("function or None", "seconds", "seconds or None", "int")[part], check)


@dataclass(frozen=True)
class ServerOptions:
    """Every server setting, with its default. Durations are seconds."""

    queues: Mapping[str, int] = field(default_factory=lambda: {"default": 1})
    concurrency: int = 10
    strict_priority: bool = False
    lease: float = 30.0
    heartbeat_interval: float = 5.0
    shutdown_timeout: float = 8.0
    default_timeout: float | None = 1800.0
    retry_delay: RetryDelayFunc = default_retry_delay
    archive_max_size: int = 10_000
    archive_max_age: float = 90 * 24 * 3600.0
    unknown_type: Literal["retry", "archive"] = "retry"
    idle_timeout: float = 10.0
    recover_interval: float = 10.0
    janitor_interval: float = 30.0
    reconcile_interval: float = 300.0
    fetch_batch: int = 32
    sync_threads: int | None = None
    fail_fast: bool = False
    block_warning: float | None = 0.5
    fair_dispatch: bool = False
    on_failure: FailureHook | None = None
    on_startup: Sequence[Callable[[], Any]] = ()
    on_shutdown: Sequence[Callable[[], Any]] = ()
    max_result_bytes: int = 1 << 20
    scheduler: bool = False
    scheduler_entries: Sequence[Entry] = ()
    log_success: bool = False  # a line per task that succeeds at INFO (else at DEBUG)
    capture_logs: bool | frozenset[str] | Sequence[str] = False  # the handlers' logging records kept in task logs
    scheduler_owner: str | None = None  # who declares scheduler_entries (an App): removes its stale ones at start
    group_aggregator: Callable[[str, list[Task]], Any] | None = None
    group_grace_period: float = 60.0
    group_max_delay: float | None = None
    group_max_size: int = 1000
    name: str | None = None
    version: str | None = None  # this worker's version: it runs tasks of min_worker_version up to it (core/deploy)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    health_port: int | None = None  # /livez and /readyz over HTTP (worker/probes.py); 0: a free port
    health_host: str = "127.0.0.1"
    health_max_lag: float = 10.0  # /livez fails once the event loop has not answered for this long
    sandbox: bool = False  # every plain (def) handler runs in a child process (docs/workers.md)
    sandbox_processes: int = 2
    sandbox_max_tasks: int = 0  # per child, then it is replaced (0: no limit)
    sandbox_max_memory_mb: int = 0  # a child above this peak RSS after a task is replaced (0: no limit)
    freeze_heap: bool = False  # once warm, the heap is frozen (worker/heap.py); `asynqpy worker` sets it

    @property
    def worker_name(self) -> str:
        """The server's worker name: ``name``, else ``<host>:<pid>``. Targeted tasks
        (``workers=``, ``runs=``) name workers by it; the processes of ``--processes N`` share it."""
        return self.name or f"{socket.gethostname()}:{os.getpid()}"

    def validate(self) -> ServerOptions:
        """Return self if every setting has a valid type and value, else raise InvalidArgumentError.
        Each setting is checked by its row of :data:`SETTINGS` (a list is kept as a frozenset
        where the row normalizes it), then the settings that depend on one another."""
        for s in SETTINGS:
            value = getattr(self, s.name)
            checked = s.check(s.name, value)
            if checked is not value:
                object.__setattr__(self, s.name, checked)
        if self.heartbeat_interval >= self.lease:
            raise InvalidArgumentError("need 0 < heartbeat_interval < lease")
        return self

    @cached_property
    def version_code(self) -> int:
        """``version`` encoded (core/deploy/versions.py encode_version; 0 = none)."""
        return 0 if self.version is None else encode_version(self.version)

    @property
    def lease_ms(self) -> int:
        return int(self.lease * 1000)

    @property
    def recover_every(self) -> float:
        """The recoverer's longest sleep: short enough to see every lease before it expires."""
        return min(self.recover_interval, self.lease / 3)


# -- the settings table ------------------------------------------------------------------------------
# One row per ServerOptions field, in field order: its check, its doc line and its `asynqpy worker`
# flag (with the flag's environment variable). ServerOptions.validate walks it; the worker command's
# flags and docs/workers.md's settings table are made from it (tests/test_settings_table.py).


@dataclass(frozen=True)
class Flag:
    """A setting's ``asynqpy worker`` flag. ``name``: the long flag; its environment variable,
    read when the flag is not given, is ``ASYNQPY_`` and the name in capitals (:attr:`env`).
    ``short``: a one-letter alias; ``off``: the flag that sets a bool setting to False
    (``--greedy``); ``least``: the flag's smallest value, where it is above the setting's;
    ``metavar``: the value's name in ``--help``; ``help``: the flag's help, where the doc line
    does not say enough for the command line."""

    name: str
    short: str | None = None
    off: str | None = None
    least: float | None = None
    metavar: str | None = None
    help: str | None = None

    @property
    def env(self) -> str:
        """The environment variable the flag is read from when not given (``ASYNQPY_CONCURRENCY``)."""
        return "ASYNQPY_" + self.name[2:].upper().replace("-", "_")


@dataclass(frozen=True)
class Setting:
    """One server setting: ``name`` (the :class:`ServerOptions` field), ``check`` (its type and
    bounds), ``doc`` (its meaning, one line of Markdown), ``flag`` (its ``asynqpy worker`` flag,
    None: none) and ``shown`` (the default as the docs show it; else its ``repr``)."""

    name: str
    check: Check
    doc: str
    flag: Flag | None = None
    shown: str | None = None

    @property
    def type(self) -> str:
        """The type as the docs show it."""
        return self.check.type

    @property
    def default(self) -> Any:
        """The default value (the :class:`ServerOptions` field's)."""
        f = next(f for f in fields(ServerOptions) if f.name == self.name)
        return cast(Callable[[], Any], f.default_factory)() if f.default is MISSING else f.default

    @property
    def env(self) -> str | None:
        """The environment variable the ``asynqpy worker`` flag reads (None: no flag)."""
        return None if self.flag is None else self.flag.env


_SECONDS, _SECONDS_OR_ZERO = Seconds(), Seconds(zero_ok=True)
_PORT = OrNone(Int(0, 65535))

SETTINGS: tuple[Setting, ...] = (
    Setting("queues", Custom("mapping name -> weight", _queues),
            "Queues to serve and their weights: `critical=6,default=3,low` (no weight: 1); a name may be a pattern, "
            "`tenant-*=1`: every queue that matches, present and future", Flag("--queues", short="-q"),
            shown='`{"default": 1}` (`worker`: an App\'s task queues)'),
    Setting("concurrency", Int(1), "Handlers running at once, per worker process", Flag("--concurrency")),
    Setting("strict_priority", Bool(), "Always serve higher-weight queues first (else a queue is tried first with "
            "probability in proportion to its weight)", Flag("--strict-priority")),
    Setting("lease", _SECONDS, "Seconds a dequeued task is reserved for this worker; renewed by the heartbeat",
            Flag("--lease", least=0.1)),
    Setting("heartbeat_interval", _SECONDS, "Seconds between lease renewals and liveness beats (less than `lease`)",
            Flag("--heartbeat-interval", least=0.01)),
    Setting("shutdown_timeout", _SECONDS_OR_ZERO, "On SIGTERM/Ctrl-C, seconds running handlers may finish before "
            "their tasks are requeued (a second signal requeues them at once)", Flag("--shutdown-timeout")),
    Setting("default_timeout", OrNone(_SECONDS), "Seconds per attempt for tasks enqueued without a timeout "
            "(None: no limit)", Flag("--default-timeout", help="Seconds per attempt for tasks enqueued without a "
                                     "timeout; 0 or 'none': no limit")),
    Setting("retry_delay", _function("retry_delay must be a function (retried, error, task) -> seconds"),
            "`f(retries_so_far, error, task) -> seconds`: how long a failed task waits in retry",
            shown="`min(15·2ⁿ, 86400)·uniform(0.5, 1)`"),
    Setting("archive_max_size", Int(0), "Archived tasks kept per queue (older ones are deleted, data included)"),
    Setting("archive_max_age", _SECONDS, "Seconds an archived task is kept", shown="90 days"),
    Setting("unknown_type", Choice("retry", "archive"), "What a task with no handler does: retry (rolling deploys) "
            "or archive at once", Flag("--unknown-type")),
    Setting("idle_timeout", _SECONDS, "Longest an idle worker blocks before checking again (new tasks wake it at "
            "once)"),
    Setting("recover_interval", _SECONDS, "Longest the recoverer sleeps (never more than `lease`/3; it wakes at the "
            "next lease expiry)"),
    Setting("janitor_interval", _SECONDS, "Longest the janitor sleeps (it wakes at the next retention expiry)"),
    Setting("reconcile_interval", _SECONDS_OR_ZERO, "Seconds from the end of a queue's consistency sweep to the "
            "next (0: never)"),
    Setting("fetch_batch", Int(1, MAX_FETCH_BATCH), "Most tasks one dequeue takes (never more than the free slots)"),
    Setting("sync_threads", OrNone(Int(1)), "Threads for plain-`def` handlers (the pool holds twice this)",
            shown="`concurrency`"),
    Setting("fail_fast", Bool(), "Exit at once if Redis cannot be reached at start (default: wait for it, "
            "retrying)", Flag("--fail-fast")),
    Setting("block_warning", OrNone(_SECONDS), "Warn (naming the task) when a handler blocks the event loop longer "
            "than this many seconds (None: never)"),
    Setting("fair_dispatch", Bool(), "Take one task per fetch and queue up behind idle workers, so a burst is "
            "spread across workers and processes (else fill every free slot at once, the fastest drain)",
            Flag("--fair", off="--greedy", help="--fair: take one task per fetch and queue up behind idle workers, "
                 "so a burst is spread across workers and processes; --greedy: fill every free slot at once "
                 "(fastest drain). Default: fair with --processes N, else greedy."),
            shown="`False` (`worker --processes N`: `True`)"),
    Setting("on_failure", OrNone(_function("on_failure must be a function (task, error, will_retry) -> None")),
            "`hook(task, error, will_retry)` after every failed attempt; what it raises is logged"),
    Setting("on_startup", _hooks("on_startup"), "Functions (sync or async) run once before the first task; one "
            "that raises stops the server"),
    Setting("on_shutdown", _hooks("on_shutdown"), "Functions (sync or async) run once after the last task"),
    Setting("max_result_bytes", Int(1), "Largest encoded result; a larger one archives the task with the reason",
            shown="1 MiB"),
    Setting("scheduler", Bool(), "Also run a scheduler: enqueue the scheduler entries' tasks on their ticks (any "
            "number of workers may: each tick is enqueued once)", Flag("--scheduler")),
    Setting("scheduler_entries", Custom("list of entries", _entries), "Scheduler entries declared in code (an "
            "App's periodic ones), stored and run by this server's scheduler"),
    Setting("log_success", Bool(), "Log a line per task that succeeds, at INFO (by default only at DEBUG)",
            Flag("--log-success")),
    Setting("capture_logs", Custom("bool or list of task types", _capture_logs), "Keep the logging records each "
            "handler emits while its task runs in the task's logs (`True`, or a list of task types)",
            Flag("--capture-logs")),
    Setting("scheduler_owner", OrNone(Custom("str", _owner)), "Who declares `scheduler_entries` (an App): at "
            "start, its stored entries no longer declared are removed"),
    Setting("group_aggregator", _group(0), "`fn(group, tasks) -> (type, payload[, options])`: aggregate the groups "
            "of the served queues"),
    Setting("group_grace_period", _group(1), "A group is due when no task joined it for this many seconds"),
    Setting("group_max_delay", _group(2), "A group is due when its oldest task waited this many seconds"),
    Setting("group_max_size", _group(3), "A group is due when it holds this many tasks"),
    Setting("name", OrNone(Text(validate_worker_name)), "This worker's name, for tasks enqueued with `workers=` or "
            "`runs=` (the processes of `--processes N` share it)", Flag("--name"), shown="`host:pid`"),
    Setting("version", OrNone(Text(encode_version)), "This worker's version (MAJOR[.MINOR[.PATCH]]): it runs tasks "
            "enqueued with `min_worker_version` up to it", Flag("--worker-version", metavar="VERSION")),
    Setting("metrics_port", _PORT, "Serve this worker's Prometheus metrics on this port (with `--processes N`, the "
            "sum of the processes')", Flag("--metrics-port", metavar="PORT")),
    Setting("metrics_host", Text(what="a host name or address"), "The address `metrics_port` binds (0.0.0.0: "
            "every interface)", Flag("--metrics-host")),
    Setting("health_port", _PORT, "Serve health probes, GET /livez and /readyz, on this port (0: a free port; one "
            "worker process: not with `--processes N`)", Flag("--health-port", metavar="PORT")),
    Setting("health_host", Text(what="a host name or address"), "The address `health_port` binds (0.0.0.0: every "
            "interface, e.g. in a container)", Flag("--health-host")),
    Setting("health_max_lag", _SECONDS, "/livez fails once the event loop has not answered for this many seconds"),
    Setting("sandbox", Bool(), "Run every plain (def) handler in a child process (a timeout kills it, a crash fails "
            "only its task)", Flag("--sandbox")),
    Setting("sandbox_processes", Int(1, 1024), "Child processes for sandboxed handlers, per worker process",
            Flag("--sandbox-processes")),
    Setting("sandbox_max_tasks", Int(0), "Tasks a child runs before it is replaced (0: no limit)",
            Flag("--sandbox-max-tasks")),
    Setting("sandbox_max_memory_mb", Int(0), "A child whose peak memory passed this many MB after a task is "
            "replaced (0: no limit)", Flag("--sandbox-max-memory", metavar="MB")),
    Setting("freeze_heap", Bool(), "Once its first task ended, collect the garbage and freeze what is left "
            "(`gc.freeze`): a full collection, a pause of every handler, then walks only the objects made since "
            "(docs/workers.md, \"The event loop\"); `asynqpy worker` sets it, a `Server` in your application "
            "leaves your heap alone unless told"),
)
"""The server's settings, one :class:`Setting` per :class:`ServerOptions` field, in field order."""

SETTING = {s.name: s for s in SETTINGS}
"""The settings by name."""


def settings_table() -> str:
    """The Markdown table of the settings (docs/workers.md, between its ``settings`` markers)."""
    lines = ["| setting | type | default | `asynqpy worker` | environment | meaning |", "|---|---|---|---|---|---|"]
    for s in SETTINGS:
        default = s.shown or (f'`"{s.default}"`' if isinstance(s.default, str) else f"`{s.default!r}`")
        flag = "" if s.flag is None else ", ".join(f"`{f}`" for f in (s.flag.name, s.flag.short, s.flag.off) if f)
        env = f"`{s.env}`" if s.env else ""
        lines.append(f"| `{s.name}` | {s.type} | {default} | {flag} | {env} | {s.doc} |")
    return "\n".join(lines)
