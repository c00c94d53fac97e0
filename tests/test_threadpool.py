"""asynqpy/worker/threadpool.py: the pool of a worker's plain-``def`` handlers."""

from __future__ import annotations

import threading
import time
from typing import Any

from asynqpy.worker.threadpool import DaemonThreadPool


class _SlowForWorkers:
    """The pool's lock, slow to take in the pool's own threads: the window between a job's outcome
    and its thread counting itself idle, which a loaded machine (CI: 4 xdist workers on 2 cores)
    opens now and then, opened every time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        if threading.current_thread().name.startswith("asynqpy-handler"):
            time.sleep(0.05)
        self.lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()


def test_jobs_submitted_one_after_another_run_on_one_thread() -> None:
    """What checks_django.py's test_a_plain_app_leaves_the_threads_connection_open assumes (a
    one-thread drain runs its tasks on one thread, so a thread-local connection is seen again):
    it failed in CI because the thread counted itself idle only after its waiter had the
    result, and the waiter's next job started a second thread (the pool holds 2 x concurrency)."""
    pool = DaemonThreadPool(2)
    pool._lock = _SlowForWorkers()  # type: ignore[assignment]
    try:
        seen = [pool.submit(threading.get_ident).result(timeout=10) for _ in range(5)]
        assert len(set(seen)) == 1, seen
        assert pool._threads == 1
        failing = pool.submit(lambda: 1 / 0)  # an error is delivered the same way
        assert isinstance(failing.exception(timeout=10), ZeroDivisionError)
        assert pool.submit(threading.get_ident).result(timeout=10) == seen[0] and pool._threads == 1
    finally:
        pool.shutdown()


def test_a_busy_thread_gets_a_second_one_up_to_the_limit() -> None:
    pool = DaemonThreadPool(2)
    release = threading.Event()
    try:
        busy = pool.submit(release.wait, 10)
        other = pool.submit(threading.get_ident).result(timeout=10)
        assert pool._threads == 2 and other != threading.get_ident()
        release.set()
        assert busy.result(timeout=10) is True
    finally:
        release.set()
        pool.shutdown()
