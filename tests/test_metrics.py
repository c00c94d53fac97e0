"""Prometheus metrics: the queue metrics (``asynqpy metrics``, :mod:`asynqpy.metrics`) and a
worker's own (``metrics_port``, ``--metrics-port``, summed over ``--processes N``), scraped over
HTTP and checked against known work; then a real Prometheus server scrapes both and a PromQL
query returns the expected per-queue values."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from helpers import serving, until
from prometheus_client.parser import text_string_to_metric_families
from redisproc import free_port

from asynqpy import Client, Inspector, InvalidArgumentError, ServeMux, Server, Task
from asynqpy.metrics import serve_queue_metrics

ROOT = Path(__file__).resolve().parent.parent
Q = "mq"


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of http://127.0.0.1:port/metrics: (name, sorted labels) -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _known_work(url: str) -> None:
    with Client(url) as c, Inspector(url) as insp:
        for i in range(3):
            c.enqueue("t", i, queue=Q)
        c.enqueue("t", "later", queue=Q, process_in=600)
        c.enqueue("t", "x", queue="other")
        insp.pause("other")


@pytest.mark.real
def test_queue_metrics_match_the_queues(redis_url: str) -> None:
    _known_work(redis_url)
    httpd = serve_queue_metrics(redis_url, 0)
    try:
        m = scrape(httpd.server_port)
    finally:
        httpd.shutdown()
    assert value(m, "asynqpy_redis_up") == 1
    assert value(m, "asynqpy_tasks_enqueued_total", queue=Q, state="pending") == 3
    assert value(m, "asynqpy_tasks_enqueued_total", queue=Q, state="scheduled") == 1
    assert value(m, "asynqpy_tasks_enqueued_total", queue=Q, state="targeted") == 0
    assert value(m, "asynqpy_queue_size", queue=Q) == 4
    assert value(m, "asynqpy_queue_paused_total", queue="other") == 1
    assert value(m, "asynqpy_queue_paused_total", queue=Q) == 0
    assert value(m, "asynqpy_tasks_processed_total", queue=Q) == 0
    assert (value(m, "asynqpy_queue_memory_usage_approx_bytes", queue=Q) or 0) > 0
    assert 0 <= (value(m, "asynqpy_queue_latency_seconds", queue=Q) or -1) < 60


@pytest.mark.real
def test_tenant_metrics_only_for_the_top_tenants_by_backlog(redis_url: str) -> None:
    """Bounded label values: of 30 tenants, only the top 3 by pending tasks get series of their
    own (``top_tenants``); the queue's tenant count is exact."""
    with Client(redis_url) as c:
        for t in range(30):
            c.enqueue_many([("t", i) for i in range(t % 7 + 1)], queue=Q, tenant=f"t{t:02d}")
    httpd = serve_queue_metrics(redis_url, 0, top_tenants=3)
    try:
        m = scrape(httpd.server_port)
    finally:
        httpd.shutdown()
    assert value(m, "asynqpy_queue_tenants", queue=Q) == 30
    tenants = {dict(labels)["tenant"]: v for (name, labels), v in m.items() if name == "asynqpy_tenant_pending_tasks"}
    assert tenants == {"t06": 7, "t13": 7, "t20": 7}  # the most pending (ties by name)
    assert value(m, "asynqpy_tenant_active_tasks", queue=Q, tenant="t06") == 0


def test_queue_metrics_report_redis_down_instead_of_failing() -> None:
    httpd = serve_queue_metrics(f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.2", 0)
    try:
        m = scrape(httpd.server_port)
    finally:
        httpd.shutdown()
    assert value(m, "asynqpy_redis_up") == 0


def test_worker_metrics_count_durations_waits_and_outcomes(backend: Any) -> None:
    mux = ServeMux()

    @mux.handle("t")
    async def handler(task: Task) -> None:
        if task.payload == "fail" and task.retry_count == 0:
            raise RuntimeError("once")
        if task.payload == "bad":
            raise RuntimeError("always")

    port = free_port()

    async def main() -> dict[Any, float]:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            for p in ["ok"] * 5 + ["fail"] * 2:
                c.enqueue("t", p, queue=Q, retry_delay=0)
            c.enqueue("t", "bad", queue=Q, max_retry=0)
            async with serving(backend.new_async(), mux, queues=[Q], metrics_port=port):
                await until(lambda: insp.queue_info(Q).processed_total == 10)
                await until(lambda: value(scrape(port), "asynqpy_tasks_total", queue=Q, type="t",
                                          outcome="archived") == 1)
                # (the forwarder's first cycle may come after the tasks: the retries move by the
                # dequeue's own forward, not only by the forwarder's)
                await until(lambda: (value(scrape(port), "asynqpy_loop_duration_seconds_count",
                                           loop="forwarder") or 0) >= 1)
                return scrape(port)

    m = asyncio.run(main())
    assert value(m, "asynqpy_tasks_total", queue=Q, type="t", outcome="succeeded") == 7
    assert value(m, "asynqpy_tasks_total", queue=Q, type="t", outcome="failed") == 3
    assert value(m, "asynqpy_tasks_total", queue=Q, type="t", outcome="retried") == 2
    assert value(m, "asynqpy_task_duration_seconds_count", queue=Q, type="t") == 10
    assert value(m, "asynqpy_task_queue_wait_seconds_count", queue=Q, type="t") == 8  # first attempts only
    assert value(m, "asynqpy_tasks_in_flight", queue=Q) == 0
    assert (value(m, "asynqpy_loop_duration_seconds_count", loop="dequeue") or 0) >= 1
    assert (value(m, "asynqpy_loop_duration_seconds_count", loop="ack") or 0) >= 1
    assert (value(m, "asynqpy_loop_duration_seconds_count", loop="forwarder") or 0) >= 1
    with pytest.raises(urllib.error.URLError):
        scrape(port)  # stopped with the server


def test_metrics_options_are_checked(redis_url: str) -> None:
    for bad in (-1, 70000, "9000", True):
        with pytest.raises(InvalidArgumentError, match="metrics_port must be an int from 0 to 65535"):
            Server(redis_url, metrics_port=bad)


def _start(args: list[str], url: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", *args, "--redis-url", url],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "tests" / "faults"), **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)


def _scraped(port: int, timeout: float = 20.0) -> dict[Any, float]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return scrape(port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.real
def test_processes_metrics_are_summed_by_the_supervisor(redis_url: str) -> None:
    port = free_port()
    with Client(redis_url) as c:
        c.enqueue_many([("job", {"ms": 1}) for _ in range(40)], queue="default")
    worker = _start(["worker", "fault_workers:mux", "--processes", "2", "--metrics-port", str(port)], redis_url,
                    ASYNQPY_RECORDER_URL=redis_url)
    try:
        deadline = time.monotonic() + 30
        while value(_scraped(port), "asynqpy_tasks_total", queue="default", type="job", outcome="succeeded") != 40:
            assert time.monotonic() < deadline, "the summed metrics never reached 40 tasks"
            time.sleep(0.2)
    finally:
        _stop(worker)


@pytest.mark.real
def test_a_real_prometheus_scrapes_both_endpoints(redis_url: str, tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("ASYNQPY_REQUIRE_REAL"):
            pytest.fail("prometheus is not installed (scripts/test installs it with apt-get)")
        pytest.skip("prometheus is not installed")
    _known_work(redis_url)
    queue_port, worker_port, prom_port = free_port(), free_port(), free_port()
    exporter = _start(["metrics", "--port", str(queue_port)], redis_url)
    worker = _start(["worker", "fault_workers:mux", "-q", "other2", "--metrics-port", str(worker_port)], redis_url,
                    ASYNQPY_RECORDER_URL=redis_url)
    (tmp_path / "prometheus.yml").write_text(f"""
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: queues
    static_configs: [{{targets: ["127.0.0.1:{queue_port}"]}}]
  - job_name: workers
    static_configs: [{{targets: ["127.0.0.1:{worker_port}"]}}]
""")
    prom = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def query(q: str) -> list[Any]:
        url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        import json
        body = json.loads(urllib.request.urlopen(url, timeout=5).read())
        assert body["status"] == "success", body
        return body["data"]["result"]  # type: ignore[no-any-return]

    try:
        with Client(redis_url) as c:
            c.enqueue_many([("job", {"ms": 1}) for _ in range(5)], queue="other2")
        deadline = time.monotonic() + 60
        pending: list[Any] = []
        done: list[Any] = []
        while True:
            try:
                pending = query(f'asynqpy_tasks_enqueued_total{{queue="{Q}",state="pending"}}')
                done = query('sum(asynqpy_tasks_total{queue="other2",outcome="succeeded"})')
                if pending and done and float(pending[0]["value"][1]) == 3 and float(done[0]["value"][1]) == 5:
                    break
            except OSError:
                pass  # (prometheus still starting)
            if time.monotonic() > deadline:  # what it saw last, which targets it scraped, and the worker's state
                targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/targets",
                                                            timeout=5).read())["data"]["activeTargets"]
                raise AssertionError(("Prometheus never saw the expected values", pending, done,
                                      [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets],
                                      worker.poll(), exporter.poll(),
                                      Inspector(redis_url).queue_info("other2")))
            time.sleep(0.5)
        assert float(query(f'asynqpy_queue_size{{queue="{Q}"}}')[0]["value"][1]) == 4
    finally:
        for p in (prom, exporter, worker):
            _stop(p)


def test_metrics_command_refuses_bad_input_in_one_line(redis_url: str) -> None:
    import socket

    from click.testing import CliRunner

    from asynqpy.cli.main import main

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        res = CliRunner().invoke(main, ["metrics", "--port", "70000", "--redis-url", redis_url])
        assert res.exit_code == 2 and "Invalid value for '--port'" in res.stderr
        res = CliRunner().invoke(main, ["metrics", "--port", str(taken.getsockname()[1]), "--redis-url", redis_url])
        assert res.exit_code == 2 and res.stderr.startswith("asynqpy: error: cannot serve on 127.0.0.1:")
        assert res.stderr.count("\n") == 1, res.stderr
    finally:
        taken.close()
