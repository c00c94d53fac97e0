"""Retry policy: the default backoff and how a failure becomes a retry or an archive."""

from __future__ import annotations

import random
from collections.abc import Callable

from ..model.task import Task

RetryDelayFunc = Callable[[int, BaseException, Task], float]
"""(retries so far, the error, the task) -> seconds until the next attempt."""

BASE_DELAY = 15.0
MAX_DELAY = 24 * 3600.0


def default_retry_delay(n: int, error: BaseException, task: Task) -> float:
    """Exponential backoff with jitter: ``min(15 * 2**n, 86400) * uniform(0.5, 1.0)`` seconds,
    n = retries so far. n=0: 7.5-15 s; n=5: 4-8 min; n>=13: 12-24 h. With the default 25 retries a
    task is archived after roughly 10-13 days of failing."""
    return min(BASE_DELAY * 2.0 ** min(n, 32), MAX_DELAY) * random.uniform(0.5, 1.0)
