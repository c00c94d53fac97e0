"""Durable runs in the metrics (docs/durable.md "Operating runs"): a worker's
``asynqpy_durable_step_seconds{function,outcome}`` (each step attempt's duration) and the queue
metrics' ``asynqpy_durable_runs{queue,function,state}`` (runs by state, a bounded read), on a
redis-server, scraped over HTTP as Prometheus does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import serving, until
from redisproc import free_port
from test_metrics import scrape, value

from asynqpy import AsyncClient, Durable, Inspector, InvalidArgumentError, Retry, ServeMux
from asynqpy.metrics import serve_queue_metrics

pytestmark = pytest.mark.real
Q = "dmet"


def test_step_durations_and_runs_by_state(redis_url: str) -> None:
    mux = ServeMux()
    tries: list[int] = []

    def flaky() -> int:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("down")
        return 1

    @mux.durable(name="m", queue=Q)
    async def m(ctx: Durable, wait: bool) -> int:
        got = await ctx.step("flaky", flaky, retry=Retry(attempts=2, delay=0.01))
        if wait:
            await ctx.wait_for("never")
        return got

    port = free_port()

    async def main() -> dict[Any, float]:
        ac = AsyncClient(redis_url)
        async with serving(redis_url, mux, queues=[Q], metrics_port=port):
            assert await ac.result(await ac.start(m, False, id="m1"), timeout=20) == 1
            await ac.start(m, True, id="m2")
            with Inspector(redis_url) as insp:
                await until(lambda: insp.durable_run(Q, "m2").state == "waiting")
            got = scrape(port)
        await ac.close()
        return got

    w = asyncio.run(main())
    assert value(w, "asynqpy_durable_step_seconds_count", function="m", outcome="retrying") == 1
    assert value(w, "asynqpy_durable_step_seconds_count", function="m", outcome="completed") == 2
    qport = free_port()
    httpd = serve_queue_metrics(redis_url, qport)
    try:
        q = scrape(qport)
    finally:
        httpd.shutdown()
    assert value(q, "asynqpy_durable_runs", queue=Q, function="m", state="completed") == 1
    assert value(q, "asynqpy_durable_runs", queue=Q, function="m", state="waiting") == 1
    with Inspector(redis_url) as insp:
        assert insp.durable_counts(Q) == {"m": {"completed": 1, "waiting": 1}}
        assert sum(insp.durable_counts(Q, scan=1)["m"].values()) >= 1  # bounded
        with pytest.raises(InvalidArgumentError):
            insp.durable_counts(Q, scan=0)
