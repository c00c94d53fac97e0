"""asynqpy: a Python task queue on Redis, modeled on Go's asynq.

Every state change of a task is one atomic Lua script. See README.md and docs/architecture.md.
"""

from .broker import QueueStats
from .client import AsyncClient, Client
from .clock import Clock, FakeClock
from .errors import (
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
    TaskIdConflictError,
    TaskNotFoundError,
    TaskStateError,
    TaskTimeoutError,
)
from .inspector import AsyncInspector, DailyStats, Inspector, QueueInfo, ServerInfo, WorkerInfo
from .mux import ServeMux
from .retry import default_retry_delay
from .server import Server, ServerOptions
from .task import Task, TaskInfo, TaskState

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncInspector", "AsynqpyError", "Client", "Clock", "DailyStats",
    "default_retry_delay", "DuplicateTaskError", "FakeClock", "HandlerNotFoundError", "Inspector",
    "InvalidArgumentError", "LeaseLostError", "MalformedMessageError", "NotReplicatedError", "PayloadError",
    "QueueInfo",
    "QueueNotEmptyError", "QueueNotFoundError", "QueueStats", "RedisFullError", "RedisUnavailableError",
    "ResultError", "ServeMux",
    "Server", "ServerInfo", "ServerOptions", "SignatureError", "SkipRetry", "Task",
    "TaskIdConflictError", "TaskInfo", "TaskNotFoundError", "TaskState", "TaskStateError",
    "TaskTimeoutError", "WorkerInfo",
]
