"""Imported at the start of every Python process the tests start (tests/conftest.py puts this
folder first on PYTHONPATH; ``site`` imports ``sitecustomize`` from the path): worker processes,
CLI runs, bench adapters, fault-scenario workers.

redis-py (8.x) imports the OpenTelemetry SDK's metrics at its own import when the SDK is installed
(``redis.observability.providers``, for its optional metrics, which asynqpy never turns on): ~0.12 s
of CPU in each of the hundreds of interpreters the suite starts. Here that one import, and only when
it comes from redis-py, finds no SDK, as on a machine without it (redis-py's own fallback); any
other import of ``opentelemetry.sdk.metrics`` (a test's, asynqpy's) is untouched. Nothing else,
but for a measure: with ASYNQPY_TEST_CPU_LOG set, each interpreter notes its start and its CPU.
"""

from __future__ import annotations

import importlib.abc
import os
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


def _log_cpu(folder: str) -> None:
    """With ASYNQPY_TEST_CPU_LOG (tests/conftest.py): a line in the folder's children.log as this
    interpreter starts (its command line) and one as it exits (its CPU seconds; none when it was
    killed), so ``python tests/cpulog.py FOLDER`` tells how much of the suite is interpreters started."""
    import atexit
    import resource

    path, pid, argv = os.path.join(folder, "children.log"), os.getpid(), " ".join(sys.orig_argv)[:300]
    os.makedirs(folder, exist_ok=True)  # (a folder not made yet failed every interpreter, the test workers too)

    def write(what: str) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{pid}\t{what}\t{argv}\n")

    def done() -> None:
        use = resource.getrusage(resource.RUSAGE_SELF)
        write(f"{use.ru_utime + use.ru_stime:.3f}")

    write("start")
    atexit.register(done)


if os.environ.get("ASYNQPY_TEST_CPU_LOG"):
    _log_cpu(os.environ["ASYNQPY_TEST_CPU_LOG"])
