"""Logging set-up for workers: plain text or one JSON object per line.

asynqpy logs through the standard :mod:`logging` module (loggers ``asynqpy.*``); an application
that configures logging itself needs nothing from here. Every line about a task carries the same
``key=value`` fields (``id=... type=... queue=... attempt=N``, and ``process=... input=...`` for a
durable process's input); with the JSON format they are also separate keys (``task_id``,
``task_type``, ``queue``, ``process_id``, ``process_input``, ``attempt``, and ``duration``, ``error``,
``retry_in`` where they apply), plus ``exc_info`` as text when there is a traceback.

What is logged, and at which level (docs/workers.md, "Logs", says the same):

- DEBUG: every task's start, and its success with its duration;
- WARNING: every failed attempt (with its traceback, except for timeouts, SkipRetry and unknown
  task types), a lease lost, Redis lost (once) and back (once, with the outage's length), an event
  loop blocked by a handler;
- ERROR: what needs a human (a task that could not be archived, a retry policy that fails).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from typing import Any

from ..core.model.task import running_task
from ..core.text.humanize import visible

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TASK_FIELDS = ("task_id", "task_type", "queue", "process_id", "process_input", "attempt", "duration", "error",
               "retry_in")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the task fields
    present on the record, and the traceback (``exc_info``) as text."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in TASK_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, with control characters shown escaped (core/humanize ``visible``): a task's
    error or a handler's log line holding terminal escape sequences reaches the terminal (or a
    log file read with ``less -R``) harmless. JSON lines need nothing: json.dumps escapes them."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Log to stderr at ``level`` (DEBUG, INFO, WARNING, ERROR) in ``fmt``: ``text`` (one line per
    record, with the task's ``key=value`` fields) or ``json`` (one JSON object per line)."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())


class TaskLogCapture(logging.Handler):
    """Keeps the :mod:`logging` records a handler emits while its task runs in the task's logs
    (``ServerOptions.capture_logs``; ``asynqpy.core.results.tasklogs``). Installed on the root logger while
    a server that captures runs (one instance per process, counted: :func:`capture_start` /
    :func:`capture_stop`); a record goes to the task of the context it is emitted in (the
    handler's own asyncio task, its thread, what it starts with ``asyncio.to_thread``), so
    concurrent tasks keep their lines apart; records of asynqpy's own loggers and records emitted
    outside a capturing task are left alone. A record reaches it only if its logger's level lets
    it through (as for any handler on the root logger)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.users = 0

    def emit(self, record: logging.LogRecord) -> None:
        last = logging.lastResort
        if last is not None and record.levelno >= last.level and self._alone(record.name):
            last.handle(record)  # (as if this handler were not there: Python prints to stderr)
        task = running_task()
        if task is None or not task._capture:
            return
        name = record.name
        if name == "asynqpy" or name.startswith("asynqpy."):
            return
        try:
            text = self.format(record)
        except Exception:  # noqa: BLE001 - a record that cannot be formatted: logging's own report
            self.handleError(record)
            return
        task.log_at(text, int(record.created * 1000))


    def _alone(self, name: str) -> bool:
        """Whether this is the only handler a record of logger ``name`` reaches: Python would then
        print it with its last-resort handler (warnings and errors to stderr), which a handler on
        the root logger turns off; an application that configured no logging keeps seeing them."""
        logger: logging.Logger | None = logging.getLogger(name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return False
            if not logger.propagate:
                return True
            logger = logger.parent
        return True


_capture = TaskLogCapture()
_capture_lock = threading.Lock()


def capture_start() -> None:
    """A server that captures task logs starts: the capture handler is on the root logger."""
    with _capture_lock:
        _capture.users += 1
        if _capture.users == 1:
            logging.getLogger().addHandler(_capture)


def capture_stop() -> None:
    """A server that captured task logs stopped: the last one takes the handler off."""
    with _capture_lock:
        _capture.users = max(0, _capture.users - 1)
        if _capture.users == 0:
            logging.getLogger().removeHandler(_capture)
