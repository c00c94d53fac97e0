"""A worker's own metrics for Prometheus (``ServerOptions.metrics_port``, ``asynqpy worker
--metrics-port``; the ``metrics`` extra: prometheus-client).

:class:`WorkerMetrics` is what the loops call; its methods do nothing, so a server without metrics
pays one method call per task and imports nothing. :func:`prometheus_metrics` returns the real
one, which records:

- ``asynqpy_task_duration_seconds{queue,type}``: how long each attempt's handler ran (histogram);
- ``asynqpy_task_queue_wait_seconds{queue,type}``: from enqueue to the first attempt's start
  (histogram; retries are left out: their wait is the retry delay, not the queue's);
- ``asynqpy_tasks_total{queue,type,outcome}``: attempts by outcome (succeeded, failed, retried,
  archived, snoozed, lease_lost, requeued; counter); ``failed`` counts every failed attempt,
  ``retried`` and ``archived`` what became of it;
- ``asynqpy_tasks_in_flight{queue}``: handlers running now (gauge);
- ``asynqpy_loop_duration_seconds{loop}``: one pass of the server's own loops (forwarder,
  recoverer, janitor) and each dequeue and acknowledgement write (histogram; after the
  progressor's per-phase histograms);
- ``asynqpy_process_phase_seconds{type,phase}``: durable processes (docs/processes.md): ``read``
  (reading the process before its processor runs), ``processing`` (the processor ran) and
  ``commit`` (from the processor's return to its step written, atomically with the input's
  completion), and ``checkpoint`` (a durable run's step written inside its input, proc_step) per
  process type (histogram). Timer scanning and zombie collection are the
  ``forwarder`` and ``recoverer`` passes of ``asynqpy_loop_duration_seconds``;
- ``asynqpy_durable_step_seconds{function,outcome}``: how long each attempt of a durable run's
  step ran (histogram; ``outcome``: completed, failed, retrying). The runs by state are queue
  metrics (:mod:`asynqpy.metrics`).

With ``asynqpy worker --processes N`` the supervisor serves the sum of its processes' metrics
(prometheus-client's multiprocess mode: each process writes its values to files in a directory the
supervisor creates, ``PROMETHEUS_MULTIPROC_DIR``).
"""

from __future__ import annotations

import os
from typing import Any

from ..core.model.errors import InvalidArgumentError

OUTCOMES = ("succeeded", "failed", "retried", "archived", "snoozed", "lease_lost", "requeued")
"""The ``outcome`` label values of ``asynqpy_tasks_total``."""
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                    900.0, 1800.0, 3600.0)
LOOP_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class WorkerMetrics:
    """The metrics the loops report; this base class records nothing."""

    enabled = False

    def started(self, queue: str, task_type: str, wait: float | None) -> None:
        """An attempt started; ``wait``: seconds since its enqueue, for a first attempt (else None)."""

    def ended(self, queue: str, task_type: str, duration: float) -> None:
        """An attempt's handler returned or raised after ``duration`` seconds."""

    def outcome(self, queue: str, task_type: str, outcome: str) -> None:
        """What an attempt came to (one of :data:`OUTCOMES`)."""

    def loop(self, name: str, seconds: float) -> None:
        """One pass of a loop (or one dequeue / acknowledgement write) took ``seconds``."""

    def process_phase(self, process_type: str, phase: str, seconds: float) -> None:
        """A phase of a process input (read, processing, commit) took ``seconds``."""

    def durable_step(self, function: str, outcome: str, seconds: float) -> None:
        """An attempt of a durable run's step ended (``outcome``: completed, failed, retrying)
        after ``seconds``."""

    def serve(self, port: int, host: str) -> None:
        """Serve ``/metrics`` on ``host:port`` (in a thread)."""

    def close(self) -> None:
        """Stop serving."""


def prometheus() -> Any:
    """prometheus_client, or InvalidArgumentError naming the extra to install."""
    return _prometheus()


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise InvalidArgumentError("metrics need prometheus-client: "
                                   "pip install '.[metrics]' in asynqpy's repository") from None
    return prometheus_client


class PrometheusMetrics(WorkerMetrics):
    """The metrics, in prometheus-client objects of a registry of their own (or, in multiprocess
    mode, in the process's files)."""

    enabled = True

    def __init__(self) -> None:
        pc = _prometheus()
        self._pc = pc
        self._httpd: Any = None
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self.registry = None if self.multiprocess else pc.CollectorRegistry()
        reg = {"registry": self.registry}  # (multiprocess: None, not registered; the files are read)
        self._duration = pc.Histogram("asynqpy_task_duration_seconds", "Seconds an attempt's handler ran.",
                                      ["queue", "type"], buckets=DURATION_BUCKETS, **reg)
        self._wait = pc.Histogram("asynqpy_task_queue_wait_seconds",
                                  "Seconds from a task's enqueue to its first attempt's start.",
                                  ["queue", "type"], buckets=DURATION_BUCKETS, **reg)
        self._total = pc.Counter("asynqpy_tasks", "Attempts by outcome.", ["queue", "type", "outcome"], **reg)
        gauge = {"multiprocess_mode": "livesum"} if self.multiprocess else {}
        self._in_flight = pc.Gauge("asynqpy_tasks_in_flight", "Handlers running now.", ["queue"], **reg, **gauge)
        self._loop = pc.Histogram("asynqpy_loop_duration_seconds",
                                  "Seconds one pass of a server loop (forwarder, recoverer, janitor), one dequeue "
                                  "or one acknowledgement write took.", ["loop"], buckets=LOOP_BUCKETS, **reg)
        self._process = pc.Histogram("asynqpy_process_phase_seconds",
                                     "Seconds a phase of a process input (read, processing, commit) took.",
                                     ["type", "phase"], buckets=DURATION_BUCKETS, **reg)
        self._durable_step = pc.Histogram("asynqpy_durable_step_seconds",
                                          "Seconds an attempt of a durable run's step ran, by its outcome.",
                                          ["function", "outcome"], buckets=DURATION_BUCKETS, **reg)

    def started(self, queue: str, task_type: str, wait: float | None) -> None:
        self._in_flight.labels(queue).inc()
        if wait is not None:
            self._wait.labels(queue, task_type).observe(max(0.0, wait))

    def ended(self, queue: str, task_type: str, duration: float) -> None:
        self._in_flight.labels(queue).dec()
        self._duration.labels(queue, task_type).observe(duration)

    def outcome(self, queue: str, task_type: str, outcome: str) -> None:
        self._total.labels(queue, task_type, outcome).inc()

    def loop(self, name: str, seconds: float) -> None:
        self._loop.labels(name).observe(seconds)

    def process_phase(self, process_type: str, phase: str, seconds: float) -> None:
        self._process.labels(process_type, phase).observe(seconds)

    def durable_step(self, function: str, outcome: str, seconds: float) -> None:
        self._durable_step.labels(function, outcome).observe(max(0.0, seconds))

    def serve(self, port: int, host: str) -> None:
        try:
            self._httpd, _ = self._pc.start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


def prometheus_metrics() -> PrometheusMetrics:
    """The metrics of this process (prometheus-client must be installed: the ``metrics`` extra)."""
    return PrometheusMetrics()


def serve_multiprocess(port: int, host: str, directory: str) -> None:
    """Serve the sum of the metrics that processes write to ``directory`` (the supervisor of
    ``--processes N``), in a thread."""
    pc = _prometheus()
    from prometheus_client import multiprocess

    registry = pc.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    try:
        pc.start_http_server(port, host, registry=registry)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
