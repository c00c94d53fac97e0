"""asynqpy: a Python task queue on Redis, modeled on Go's asynq.

Every state change of a task is one atomic Lua script. See README.md, docs/index.md and docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below are imported on first use (PEP 562): a worker or a CLI
    # command loads only the modules it needs, so it starts sooner
    from .app import App, AsyncTaskFunction, TaskFunction
    from .client import AsyncClient, Client
    from .core.broker import QueueStats
    from .core.clock import Clock, FakeClock
    from .core.cron import EntryInfo
    from .core.errors import (
        AsynqpyError,
        DuplicateTaskError,
        EntryNotFoundError,
        HandlerNotFoundError,
        InvalidArgumentError,
        LeaseLostError,
        MalformedMessageError,
        NotReplicatedError,
        PayloadError,
        QueueFullError,
        QueueNotEmptyError,
        QueueNotFoundError,
        RateLimited,
        RedisAuthError,
        RedisFullError,
        RedisUnavailableError,
        ResultError,
        SignatureError,
        SkipRetry,
        TaskFailedError,
        TaskIdConflictError,
        TaskNotFoundError,
        TaskStateError,
        TaskTimeoutError,
        ThrottledError,
    )
    from .core.events import TaskEvent
    from .core.limits import QueueLimits
    from .core.mux import ServeMux
    from .core.process import KEEP, Event, Input, Process, ProcessError, ProcessNotFoundError, Step
    from .core.queue_settings import QueueCap
    from .core.retry import default_retry_delay
    from .core.task import Task, TaskInfo, TaskState, current_task
    from .core.tasklogs import LogLine
    from .core.tenants import TenantInfo
    from .inspector import AsyncInspector, DailyStats, Inspector, QueueInfo, ServerInfo, WorkerInfo
    from .limiter import Limiter
    from .scheduler import Scheduler
    from .server import Server, ServerOptions
    from .worker.logs import configure_logging
    from .workflows import Sig, chain, group

__version__ = "0.1.0"

__all__ = [
    "App", "AsyncClient", "AsyncInspector", "AsyncTaskFunction", "AsynqpyError", "Client", "Clock",
    "configure_logging", "current_task", "DailyStats", "default_retry_delay", "DuplicateTaskError", "EntryInfo",
    "EntryNotFoundError", "FakeClock", "HandlerNotFoundError", "Inspector", "InvalidArgumentError",
    "LeaseLostError", "Limiter", "LogLine", "MalformedMessageError", "NotReplicatedError", "PayloadError", "QueueInfo",
    "QueueCap", "QueueFullError", "QueueLimits", "QueueNotEmptyError", "QueueNotFoundError", "QueueStats",
    "RateLimited", "RedisFullError",
    "RedisUnavailableError", "ResultError", "Scheduler", "ServeMux", "Server", "ServerInfo", "ServerOptions",
    "SignatureError", "SkipRetry", "Task", "TaskEvent", "TaskFailedError", "TaskFunction", "TaskIdConflictError",
    "TaskInfo", "TaskNotFoundError", "TaskState", "TaskStateError", "TaskTimeoutError", "TenantInfo",
    "ThrottledError", "WorkerInfo", "Sig", "chain", "group", "KEEP", "Event", "Input", "Process", "ProcessError",
    "ProcessNotFoundError", "Step", "RedisAuthError",
]


_WHERE = {
    "App": "app", "AsyncTaskFunction": "app", "TaskFunction": "app",
    "AsyncClient": "client", "Client": "client",
    "QueueStats": "core.broker", "Clock": "core.clock", "FakeClock": "core.clock",
    "TaskEvent": "core.events", "ServeMux": "core.mux", "default_retry_delay": "core.retry",
    "Task": "core.task", "TaskInfo": "core.task", "TaskState": "core.task", "current_task": "core.task",
    "LogLine": "core.tasklogs", "TenantInfo": "core.tenants",
    "AsyncInspector": "inspector", "DailyStats": "inspector", "Inspector": "inspector", "QueueInfo": "inspector",
    "ServerInfo": "inspector", "WorkerInfo": "inspector",
    "Server": "server", "ServerOptions": "server", "configure_logging": "worker.logs",
    "Scheduler": "scheduler", "EntryInfo": "core.cron", "Limiter": "limiter", "QueueLimits": "core.limits",
    "QueueCap": "core.queue_settings",
    "Sig": "workflows", "chain": "workflows", "group": "workflows",
    "KEEP": "core.process", "Event": "core.process", "Input": "core.process", "Process": "core.process",
    "ProcessError": "core.process", "ProcessNotFoundError": "core.process", "Step": "core.process",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (``from asynqpy import Client`` as usual)."""
    where = _WHERE.get(name) or ("core.errors" if name in __all__ else None)
    if where is None:
        raise AttributeError(f"module 'asynqpy' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
