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
    from .core.cron.entries import EntryInfo
    from .core.durable.function import DurableFunction
    from .core.durable.replay import (
        DeterminismError,
        Durable,
        DurableError,
        DurableRun,
        Retry,
        RunFailedError,
        StepFailedError,
    )
    from .core.handlers.mux import ServeMux
    from .core.handlers.retry import default_retry_delay
    from .core.limits.plans import QueueLimits
    from .core.model.clock import Clock, FakeClock
    from .core.model.errors import (
        AsynqpyError,
        BlobError,
        BlobNotFoundError,
        DecryptionError,
        DuplicateTaskError,
        EncryptionError,
        EntryNotFoundError,
        HandlerNotFoundError,
        InvalidArgumentError,
        KeyNotFoundError,
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
    from .core.model.task import Task, TaskInfo, TaskState, current_task
    from .core.processes.model import KEEP, Event, Input, Process, ProcessError, ProcessNotFoundError, Step
    from .core.results.events import TaskEvent
    from .core.results.tasklogs import LogLine
    from .core.security.encryption import KeyRing
    from .core.spine.broker import QueueStats
    from .core.spine.protocol import ProtocolVersionError
    from .core.spine.queue_settings import QueueCap
    from .core.tenants.plans import TenantInfo
    from .cron import Scheduler
    from .inspector import AsyncInspector, DailyStats, Inspector, QueueInfo, ServerInfo, WorkerInfo
    from .limiter import Limiter
    from .server import Server, ServerOptions
    from .worker.blobs import BlobStore, FileBlobStore, S3BlobStore
    from .worker.logs import configure_logging
    from .workflows import Sig, chain, group

__version__ = "0.1.0"  # = core/spine/protocol.py LIBRARY_VERSION and pyproject.toml (tests/test_protocol.py)

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
    "ProcessNotFoundError", "Step", "RedisAuthError", "DeterminismError", "Durable", "DurableError",
    "DurableFunction", "DurableRun", "Retry", "RunFailedError", "StepFailedError", "ProtocolVersionError",
    "KeyRing", "EncryptionError", "KeyNotFoundError", "DecryptionError",
    "BlobError", "BlobNotFoundError", "BlobStore", "FileBlobStore", "S3BlobStore",
]


_WHERE = {
    "App": "app", "AsyncTaskFunction": "app", "TaskFunction": "app",
    "AsyncClient": "client", "Client": "client",
    "QueueStats": "core.spine.broker",
    "Clock": "core.model.clock", "FakeClock": "core.model.clock",
    "TaskEvent": "core.results.events",
    "ServeMux": "core.handlers.mux",
    "default_retry_delay": "core.handlers.retry",
    "Task": "core.model.task", "TaskInfo": "core.model.task", "TaskState": "core.model.task",
    "current_task": "core.model.task",
    "LogLine": "core.results.tasklogs",
    "TenantInfo": "core.tenants.plans",
    "AsyncInspector": "inspector", "DailyStats": "inspector", "Inspector": "inspector", "QueueInfo": "inspector",
    "ServerInfo": "inspector", "WorkerInfo": "inspector",
    "Server": "server", "ServerOptions": "server",
    "configure_logging": "worker.logs",
    "BlobStore": "worker.blobs", "FileBlobStore": "worker.blobs", "S3BlobStore": "worker.blobs",
    "Scheduler": "cron",
    "EntryInfo": "core.cron.entries",
    "Limiter": "limiter",
    "QueueLimits": "core.limits.plans", "QueueCap": "core.spine.queue_settings",
    "Sig": "workflows", "chain": "workflows", "group": "workflows",
    "KEEP": "core.processes.model", "Event": "core.processes.model", "Input": "core.processes.model",
    "Process": "core.processes.model", "ProcessError": "core.processes.model",
    "ProcessNotFoundError": "core.processes.model", "Step": "core.processes.model",
    **dict.fromkeys(("DeterminismError", "Durable", "DurableError", "DurableRun", "Retry",
                     "RunFailedError", "StepFailedError"), "core.durable.replay"),
    "DurableFunction": "core.durable.function",
    "ProtocolVersionError": "core.spine.protocol",
    "KeyRing": "core.security.encryption",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (``from asynqpy import Client`` as usual)."""
    where = _WHERE.get(name) or ("core.model.errors" if name in __all__ else None)
    if where is None:
        raise AttributeError(f"module 'asynqpy' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
