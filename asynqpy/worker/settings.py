"""ServerOptions: every setting of a server, validated (the worker loops read them)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from ..core.cron import Entry
from ..core.deploy import encode_version
from ..core.errors import InvalidArgumentError
from ..core.keys import validate_queue_or_pattern, validate_worker_name
from ..core.options import MAX_SECONDS
from ..core.retry import RetryDelayFunc, default_retry_delay
from ..core.task import Task

FailureHook = Callable[[Task, BaseException, bool], Any]
"""``on_failure(task, error, will_retry)``: called after every failed attempt (a plain function
runs in the thread pool, an ``async def`` on the event loop); what it raises is logged."""

MAX_FETCH_BATCH = 1000
"""Most tasks one dequeue call may take (bulk script calls stay bounded)."""


def _integer(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"from {low} to {high}"
        raise InvalidArgumentError(f"{name} must be an int {bounds}, got {value!r}")


def _seconds(name: str, value: Any, *, zero_ok: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        0 <= value <= MAX_SECONDS and (zero_ok or value > 0)
    ):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds {'>= 0' if zero_ok else '> 0'} (at most 100 years), got {value!r}"
        )


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
    version: str | None = None  # this worker's version: it runs tasks of min_worker_version up to it (core/deploy.py)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    health_port: int | None = None  # /livez and /readyz over HTTP (worker/probes.py); 0: a free port
    health_host: str = "127.0.0.1"
    health_max_lag: float = 10.0  # /livez fails once the event loop has not answered for this long
    sandbox: bool = False  # every plain (def) handler runs in a child process (docs/workers.md)
    sandbox_processes: int = 2
    sandbox_max_tasks: int = 0  # per child, then it is replaced (0: no limit)
    sandbox_max_memory_mb: int = 0  # a child above this peak RSS after a task is replaced (0: no limit)

    @property
    def worker_name(self) -> str:
        """The server's worker name: ``name``, else ``<host>:<pid>``. Targeted tasks
        (``workers=``, ``runs=``) name workers by it; the processes of ``--processes N`` share it."""
        return self.name or f"{socket.gethostname()}:{os.getpid()}"

    def validate(self) -> ServerOptions:
        """Return self if every setting has a valid type and value, else raise InvalidArgumentError."""
        if not isinstance(self.queues, Mapping) or not self.queues:
            raise InvalidArgumentError("a server needs at least one queue (a mapping name -> weight)")
        for name, weight in self.queues.items():
            validate_queue_or_pattern(name)
            _integer(f"queue {name!r} weight", weight, 1)
        _integer("concurrency", self.concurrency, 1)
        if self.name is not None:
            validate_worker_name(self.name)
        if self.version is not None:
            encode_version(self.version)
        if self.metrics_port is not None:
            _integer("metrics_port", self.metrics_port, 0, 65535)
        if not isinstance(self.metrics_host, str) or not self.metrics_host:
            raise InvalidArgumentError(f"metrics_host must be a host name or address, got {self.metrics_host!r}")
        if self.health_port is not None:
            _integer("health_port", self.health_port, 0, 65535)
        if not isinstance(self.health_host, str) or not self.health_host:
            raise InvalidArgumentError(f"health_host must be a host name or address, got {self.health_host!r}")
        _seconds("health_max_lag", self.health_max_lag)
        _integer("fetch_batch", self.fetch_batch, 1, MAX_FETCH_BATCH)
        _integer("archive_max_size", self.archive_max_size, 0)
        if self.sync_threads is not None:
            _integer("sync_threads", self.sync_threads, 1)
        for name in ("lease", "heartbeat_interval", "idle_timeout", "recover_interval", "janitor_interval",
                     "archive_max_age"):
            _seconds(name, getattr(self, name))
        _seconds("shutdown_timeout", self.shutdown_timeout, zero_ok=True)
        _seconds("reconcile_interval", self.reconcile_interval, zero_ok=True)  # 0 = no consistency sweep
        if self.default_timeout is not None:
            _seconds("default_timeout", self.default_timeout)
        if self.heartbeat_interval >= self.lease:
            raise InvalidArgumentError("need 0 < heartbeat_interval < lease")
        if not isinstance(self.strict_priority, bool):
            raise InvalidArgumentError(f"strict_priority must be a bool, got {self.strict_priority!r}")
        for name in ("fail_fast", "fair_dispatch", "scheduler", "log_success"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.block_warning is not None:
            _seconds("block_warning", self.block_warning)
        if self.unknown_type not in ("retry", "archive"):
            raise InvalidArgumentError("unknown_type must be 'retry' or 'archive'")
        if self.on_failure is not None and not callable(self.on_failure):
            raise InvalidArgumentError("on_failure must be a function (task, error, will_retry) -> None")
        _integer("max_result_bytes", self.max_result_bytes, 1)
        if not isinstance(self.capture_logs, bool):
            types = self.capture_logs
            if isinstance(types, (str, bytes)) or not isinstance(types, (Sequence, frozenset, set)) \
                    or not all(isinstance(t, str) and t for t in types):
                raise InvalidArgumentError("capture_logs must be a bool or a list of task types, got "
                                           f"{self.capture_logs!r}")
            object.__setattr__(self, "capture_logs", frozenset(types))
        if not isinstance(self.sandbox, bool):
            raise InvalidArgumentError(f"sandbox must be a bool, got {self.sandbox!r}")
        _integer("sandbox_processes", self.sandbox_processes, 1, 1024)
        _integer("sandbox_max_tasks", self.sandbox_max_tasks, 0)
        _integer("sandbox_max_memory_mb", self.sandbox_max_memory_mb, 0)
        for name in ("on_startup", "on_shutdown"):
            hooks = getattr(self, name)
            if isinstance(hooks, (str, bytes)) or not isinstance(hooks, Sequence) or not all(map(callable, hooks)):
                raise InvalidArgumentError(f"{name} must be a list of functions, got {hooks!r}")
        if isinstance(self.scheduler_entries, (str, bytes)) or not isinstance(self.scheduler_entries, Sequence) \
                or not all(isinstance(e, Entry) for e in self.scheduler_entries):
            raise InvalidArgumentError("scheduler_entries must be a list of entries (Scheduler.register / "
                                       f"asynqpy.core.cron.make_entry), got {self.scheduler_entries!r}")
        if self.scheduler_owner is not None:
            from ..core.keys import validate_name

            validate_name("scheduler_owner", self.scheduler_owner, 200)
        from .aggregator import check_params

        check_params(self.group_aggregator, self.group_grace_period, self.group_max_delay, self.group_max_size)
        if not callable(self.retry_delay):
            raise InvalidArgumentError("retry_delay must be a function (retried, error, task) -> seconds")
        return self

    @cached_property
    def version_code(self) -> int:
        """``version`` encoded (core/deploy.py encode_version; 0 = none)."""
        return 0 if self.version is None else encode_version(self.version)

    @property
    def lease_ms(self) -> int:
        return int(self.lease * 1000)

    @property
    def recover_every(self) -> float:
        """The recoverer's longest sleep: short enough to see every lease before it expires."""
        return min(self.recover_interval, self.lease / 3)
