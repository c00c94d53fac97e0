"""A bounded pool of daemon threads for plain-``def`` handlers.

The standard ThreadPoolExecutor joins its threads when the interpreter exits, so one sync handler
stuck past its timeout would keep a worker process from ever exiting after a graceful shutdown.
These threads are daemons: the process exits once the server is done, and a requeued task's
abandoned thread dies with it."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


class DaemonThreadPool(Executor):
    """Runs callables on at most ``max_workers`` daemon threads, started as needed: a job runs on
    an idle thread when there is one (a thread counts as idle once its job's outcome is known,
    before its submitter hears it), so jobs submitted one after another run on one thread."""

    def __init__(self, max_workers: int, name: str = "asynqpy-handler") -> None:
        self._max = max_workers
        self._name = name
        Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("pool is shut down")
            if self._idle == 0 and self._threads < self._max:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()
            else:
                self._idle -= 1 if self._idle else 0
        self._jobs.put((future, fn, args, kwargs))
        return future

    def resize(self, max_workers: int) -> None:
        """At most ``max_workers`` threads from now on: more are started as jobs need them; when
        fewer, the threads already started stay (idle ones only wait on the job queue)."""
        with self._lock:
            self._max = max_workers

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():
                with self._lock:
                    self._idle += 1
                continue
            try:
                result, error = fn(*args, **kwargs), None
            except BaseException as exc:  # noqa: BLE001 - delivered to the awaiting handler
                result, error = None, exc
            # idle BEFORE the outcome is delivered: the job its waiter submits next (the next task of
            # a one-thread worker) finds this thread idle and runs on it; counted after, a new
            # thread was started whenever the waiter was quicker (a loaded machine)
            with self._lock:
                self._idle += 1
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)
            del result, error

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            n = self._threads
        for _ in range(n):
            self._jobs.put(None)
