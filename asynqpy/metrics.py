"""Queue metrics for Prometheus, read from Redis at each scrape (the ``metrics`` extra:
prometheus-client). ``asynqpy metrics --port 9876`` serves them; :func:`queue_registry` gives a
registry to serve yourself.

The names follow asynq's exporter with the ``asynqpy_`` prefix and the same labels, so a Grafana
dashboard made for asynq ports by renaming ``asynq_`` to ``asynqpy_``:

- ``asynqpy_tasks_enqueued_total{queue,state}`` (gauge): tasks per state (pending, active,
  scheduled, retry, archived, completed, and asynqpy's aggregating, targeted, waiting and blocked);
- ``asynqpy_queue_size{queue}``, ``asynqpy_queue_latency_seconds{queue}`` (age of the oldest
  pending task), ``asynqpy_queue_memory_usage_approx_bytes{queue}``,
  ``asynqpy_queue_paused_total{queue}`` (1 when paused): gauges;
- ``asynqpy_tasks_processed_total{queue}``, ``asynqpy_tasks_failed_total{queue}``: counters;
- ``asynqpy_redis_up`` (1, or 0 when the last scrape could not read Redis).

A worker's own metrics (durations, outcomes, in flight) are served by the worker:
:mod:`asynqpy.worker.metrics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from .core.inspection import QueueInfo
from .inspector import Inspector
from .worker.metrics import prometheus as _prometheus

log = logging.getLogger("asynqpy.metrics")

STATES = ("pending", "active", "scheduled", "retry", "archived", "completed", "aggregating", "targeted",
          "waiting", "blocked")


MEMORY_EVERY = 30.0
"""Seconds a queue's sampled memory reading is reused: it costs four times what the rest of a
scrape costs, and it is an approximation anyway."""


class QueueCollector:
    """A prometheus-client collector: every queue's :class:`~asynqpy.QueueInfo`, read with one
    pipelined round trip per scrape (the memory readings at most every :data:`MEMORY_EVERY`
    seconds)."""

    def __init__(self, inspector: Inspector) -> None:
        self.inspector = inspector
        self._memory: dict[str, int | None] = {}
        self._memory_at = -MEMORY_EVERY
        _prometheus()  # (the extra is installed)
        import prometheus_client.core

        self._core = prometheus_client.core

    def collect(self) -> Iterator[Any]:
        """The metric families of one scrape."""
        core = self._core
        up = core.GaugeMetricFamily("asynqpy_redis_up", "1 if this scrape read the queues from Redis, else 0.")
        try:
            now = time.monotonic()
            fresh = now - self._memory_at >= MEMORY_EVERY
            infos = self.inspector.all_queue_info(memory=fresh)
            if fresh:
                self._memory, self._memory_at = {q.queue: q.memory_bytes for q in infos}, now
            else:
                infos = [replace(q, memory_bytes=self._memory.get(q.queue)) for q in infos]
        except Exception as exc:  # noqa: BLE001 - a scrape reports the outage instead of failing
            log.warning("metrics scrape could not read Redis: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families(core, infos)

    def describe(self) -> list[Any]:
        return []  # (no scrape at registration)


def families(core: Any, infos: list[QueueInfo]) -> Iterator[Any]:
    """The queue metric families of ``infos`` (``core``: ``prometheus_client.core``)."""
    gauge, counter = core.GaugeMetricFamily, core.CounterMetricFamily
    states = gauge("asynqpy_tasks_enqueued_total", "Number of tasks in a queue, by state.", labels=["queue", "state"])
    size = gauge("asynqpy_queue_size", "Number of tasks in a queue.", labels=["queue"])
    latency = gauge("asynqpy_queue_latency_seconds",
                    "Seconds the oldest pending task of a queue has waited.", labels=["queue"])
    memory = gauge("asynqpy_queue_memory_usage_approx_bytes",
                   "Memory used by a queue's keys (approximated by sampling).", labels=["queue"])
    paused = gauge("asynqpy_queue_paused_total", "1 if the queue is paused, else 0.", labels=["queue"])
    processed = counter("asynqpy_tasks_processed", "Tasks processed (succeeded and failed attempts).",
                        labels=["queue"])
    failed = counter("asynqpy_tasks_failed", "Failed attempts.", labels=["queue"])
    for q in infos:
        for state in STATES:
            states.add_metric([q.queue, state], getattr(q, state))
        size.add_metric([q.queue], q.size)
        latency.add_metric([q.queue], q.latency)
        memory.add_metric([q.queue], q.memory_bytes or 0)
        paused.add_metric([q.queue], 1 if q.paused else 0)
        processed.add_metric([q.queue], q.processed_total)
        failed.add_metric([q.queue], q.failed_total)
    yield from (states, size, latency, memory, paused, processed, failed)


def queue_registry(redis: Any = None) -> Any:
    """A prometheus-client ``CollectorRegistry`` holding the queue metrics of ``redis`` (a URL or
    a client, as for :class:`~asynqpy.Inspector`)."""
    pc = _prometheus()
    registry = pc.CollectorRegistry()
    registry.register(QueueCollector(Inspector(redis)))
    return registry


def serve_queue_metrics(redis: Any, port: int, host: str = "127.0.0.1") -> Any:
    """Serve the queue metrics on ``http://host:port/metrics`` in a thread; returns the HTTP server
    (``.shutdown()`` stops it)."""
    pc = _prometheus()
    httpd, _ = pc.start_http_server(port, host, registry=queue_registry(redis))
    return httpd
