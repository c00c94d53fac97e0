"""Logging set-up for workers: plain text or one JSON object per line.

asynqpy logs through the standard :mod:`logging` module (loggers ``asynqpy.*``); an application
that configures logging itself needs nothing from here. Every line about a task carries the same
``key=value`` fields (``id=... type=... queue=... attempt=N``, and ``process=... input=...`` for a
durable process's input); with the JSON format they are also separate keys (``task_id``,
``task_type``, ``queue``, ``process_id``, ``process_input``, ``attempt``, and ``duration``, ``error``,
``retry_in`` where they apply), plus ``exc_info`` as text when there is a traceback.

What is logged, and at which level (the README's "Logging" section says the same):

- DEBUG: every task's start, and its success with its duration;
- WARNING: every failed attempt (with its traceback, except for timeouts, SkipRetry and unknown
  task types), a lease lost, Redis lost (once) and back (once, with the outage's length), an event
  loop blocked by a handler;
- ERROR: what needs a human (a task that could not be archived, a retry policy that fails).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

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


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Log to stderr at ``level`` (DEBUG, INFO, WARNING, ERROR) in ``fmt``: ``text`` (one line per
    record, with the task's ``key=value`` fields) or ``json`` (one JSON object per line)."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
