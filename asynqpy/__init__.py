"""asynqpy: a Python task queue on Redis, modeled on Go's asynq.

Every state change of a task is one atomic Lua script. See README.md and docs/architecture.md.
"""

from .app import App, AsyncTaskFunction, TaskFunction
from .client import AsyncClient, Client
from .core.broker import QueueStats
from .core.clock import Clock, FakeClock
from .core.errors import (
    AsynqpyError,
    DuplicateTaskError,
    HandlerNotFoundError,
    InvalidArgumentError,
    LeaseLostError,
    MalformedMessageError,
    NotReplicatedError,
    PayloadError,
    QueueNotEmptyError,
    QueueNotFoundError,
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
)
from .core.events import TaskEvent
from .core.mux import ServeMux
from .core.retry import default_retry_delay
from .core.task import Task, TaskInfo, TaskState, current_task
from .inspector import AsyncInspector, DailyStats, Inspector, QueueInfo, ServerInfo, WorkerInfo
from .server import Server, ServerOptions
from .worker.logs import configure_logging

__version__ = "0.1.0"

__all__ = [
    "App", "AsyncClient", "AsyncInspector", "AsyncTaskFunction", "AsynqpyError", "Client", "Clock",
    "configure_logging", "current_task", "DailyStats", "default_retry_delay", "DuplicateTaskError", "FakeClock",
    "HandlerNotFoundError", "Inspector", "InvalidArgumentError", "LeaseLostError", "MalformedMessageError",
    "NotReplicatedError", "PayloadError", "QueueInfo", "QueueNotEmptyError", "QueueNotFoundError", "QueueStats",
    "RedisFullError", "RedisUnavailableError", "ResultError", "ServeMux", "Server", "ServerInfo",
    "ServerOptions", "SignatureError", "SkipRetry", "Task", "TaskEvent", "TaskFailedError", "TaskFunction",
    "TaskIdConflictError", "TaskInfo", "TaskNotFoundError", "TaskState", "TaskStateError", "TaskTimeoutError",
    "WorkerInfo",
]
