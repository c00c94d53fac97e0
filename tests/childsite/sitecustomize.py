"""Imported at the start of every Python process the tests start (tests/conftest.py puts this
folder first on PYTHONPATH; ``site`` imports ``sitecustomize`` from the path): worker processes,
CLI runs, bench adapters, fault-scenario workers.

redis-py (8.x) imports the OpenTelemetry SDK's metrics at its own import when the SDK is installed
(``redis.observability.providers``, for its optional metrics, which asynqpy never turns on): ~0.12 s
of CPU in each of the hundreds of interpreters the suite starts. Here that one import, and only when
it comes from redis-py, finds no SDK, as on a machine without it (redis-py's own fallback); any
other import of ``opentelemetry.sdk.metrics`` (a test's, asynqpy's) is untouched. Nothing else.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

_HIDDEN = "opentelemetry.sdk.metrics"
_IMPORTER = "redis.observability.providers"


class _NoSdkForRedis(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name != _HIDDEN:
            return None
        sys.meta_path.remove(self)  # once: redis-py's import is the first of it
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_globals.get("__name__") == _IMPORTER:
                raise ModuleNotFoundError(f"No module named {_HIDDEN!r} (hidden from redis-py by tests/childsite)",
                                          name=_HIDDEN)
            frame = frame.f_back  # type: ignore[assignment]
        return None


if "redis" not in sys.modules:
    sys.meta_path.insert(0, _NoSdkForRedis())
