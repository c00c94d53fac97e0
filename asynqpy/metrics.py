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
- ``asynqpy_redis_up`` (1, or 0 when the last scrape could not read Redis);
- tenants (docs/tenants.md): ``asynqpy_queue_tenants{queue}`` (tenants with pending tasks), and
  for the ``top_tenants`` (default 10) with the most pending tasks of each queue,
  ``asynqpy_tenant_pending_tasks{queue,tenant}`` and ``asynqpy_tenant_active_tasks{queue,tenant}``:
  the label values stay bounded however many tenants there are (the top is taken among the first
  ``tenant_scan`` tenants by name, 2 000 by default: a scrape's cost stays bounded too);
- durable runs (docs/durable.md): ``asynqpy_durable_runs{queue,function,state}`` (gauge), the
  runs of each function by state, among the first ``durable_scan`` process records of each queue
  (10 000 by default; 0: not exported). A worker's step durations are its own metrics
  (``asynqpy_durable_step_seconds``).

A worker's own metrics (durations, outcomes, in flight) are served by the worker:
:mod:`asynqpy.worker.metrics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from .core.inspector.inspection import QueueInfo
from .core.spine.queue_settings import metric_families
from .inspector import Inspector
from .worker.metrics import prometheus as _prometheus

log = logging.getLogger("asynqpy.metrics")

STATES = ("pending", "active", "scheduled", "retry", "archived", "completed", "aggregating", "targeted",
          "waiting", "blocked")


MEMORY_EVERY = 30.0
"""Seconds a queue's sampled memory reading is reused: it costs four times what the rest of a
scrape costs, and it is an approximation anyway."""


TOP_TENANTS = 10
"""Tenants per queue whose own series are exported (those with the most pending tasks)."""
TENANT_SCAN = 2000
"""Tenants per queue a scrape reads at most to find them (pages of 1 000, in name order)."""
DURABLE_SCAN = 10_000
"""Process records per queue a scrape reads at most to count durable runs by state."""


class QueueCollector:
    """A prometheus-client collector: every queue's :class:`~asynqpy.QueueInfo`, read with one
    pipelined round trip per scrape (the memory readings at most every :data:`MEMORY_EVERY`
    seconds), and the top tenants of the queues that have tenants."""

    def __init__(self, inspector: Inspector, top_tenants: int = TOP_TENANTS, tenant_scan: int = TENANT_SCAN,
                 durable_scan: int = DURABLE_SCAN) -> None:
        self.inspector = inspector
        self.top_tenants, self.tenant_scan, self.durable_scan = top_tenants, tenant_scan, durable_scan
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
        yield from self._tenants(core, infos)
        yield from self._durable(core, infos)

    def _durable(self, core: Any, infos: list[QueueInfo]) -> Iterator[Any]:
        runs = core.GaugeMetricFamily("asynqpy_durable_runs", "Durable runs of a function, by state.",
                                      labels=["queue", "function", "state"])
        if self.durable_scan > 0:
            for q in infos:
                for function, states in sorted(self.inspector.durable_counts(q.queue, scan=self.durable_scan).items()):
                    for state, n in sorted(states.items()):
                        runs.add_metric([q.queue, function, state], n)
        yield runs

    def _tenants(self, core: Any, infos: list[QueueInfo]) -> Iterator[Any]:
        gauge = core.GaugeMetricFamily
        count = gauge("asynqpy_queue_tenants", "Tenants with pending tasks in a queue.", labels=["queue"])
        pending = gauge("asynqpy_tenant_pending_tasks", "Pending tasks of a tenant (the queue's top tenants).",
                        labels=["queue", "tenant"])
        active = gauge("asynqpy_tenant_active_tasks", "Active tasks of a tenant (the queue's top tenants).",
                       labels=["queue", "tenant"])
        for q in infos:
            count.add_metric([q.queue], q.tenants)
            if not q.tenants or self.top_tenants <= 0:
                continue
            seen: list[Any] = []
            after = ""
            while len(seen) < self.tenant_scan:
                page = self.inspector.tenants(q.queue, after=after, count=min(1000, self.tenant_scan - len(seen)))
                seen += page
                if len(page) < 1000:
                    break
                after = page[-1].tenant
            for t in sorted(seen, key=lambda t: (-t.pending, t.tenant))[:self.top_tenants]:
                pending.add_metric([q.queue, t.tenant], t.pending)
                active.add_metric([q.queue, t.tenant], t.active)
        yield from (count, pending, active)

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
    yield from metric_families(gauge, counter, infos)  # (the queue settings' stats: core/spine/queue_settings.py)


def queue_registry(redis: Any = None, top_tenants: int = TOP_TENANTS) -> Any:
    """A prometheus-client ``CollectorRegistry`` holding the queue metrics of ``redis`` (a URL or
    a client, as for :class:`~asynqpy.Inspector`); ``top_tenants``: tenants per queue with series
    of their own (0: none)."""
    pc = _prometheus()
    registry = pc.CollectorRegistry()
    registry.register(QueueCollector(Inspector(redis), top_tenants))
    return registry


def serve_queue_metrics(redis: Any, port: int, host: str = "127.0.0.1", top_tenants: int = TOP_TENANTS) -> Any:
    """Serve the queue metrics on ``http://host:port/metrics`` in a thread; returns the HTTP server
    (``.shutdown()`` stops it)."""
    pc = _prometheus()
    httpd, _ = pc.start_http_server(port, host, registry=queue_registry(redis, top_tenants))
    return httpd
