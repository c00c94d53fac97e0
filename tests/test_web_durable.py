"""The console's durable runs (docs/durable.md "Operating runs"; docs/web.md): the API in-process
(FastAPI's TestClient), and the runs page and a run's timeline page in headless Chromium (as
tests/test_web_browser.py) against a redis-server and a worker in a thread: a failed run is found
by its state, its timeline shows the failed step, the fix is deployed and the run resumed from its
page; a waiting run is cancelled from its page."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_web_browser import Console, _chromium, _read, click, shoot, wait_for

from asynqpy import Client, Durable, DurableRun, Inspector, Retry, ServeMux, Server
from asynqpy.web import create_app

pytestmark = pytest.mark.real

Q = "wdur"


class Deployed:
    """The code the worker runs: ``fixed`` False, the step 'charge' raises."""

    fixed = False


def durable_mux() -> ServeMux:
    mux = ServeMux()

    def charge(n: int) -> int:
        if not Deployed.fixed:
            raise ValueError("declined <script>alert(1)</script>")
        return n * 10

    @mux.durable(name="order", queue=Q)
    async def order(ctx: Durable, n: int) -> int:
        await ctx.step("reserve", lambda: n)
        return await ctx.step("charge", charge, n, retry=Retry(attempts=1))

    @mux.durable(name="waiter", queue=Q)
    async def waiter(ctx: Durable) -> Any:
        return await ctx.wait_for("go")

    return mux


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from _chromium()


@pytest.fixture
def worker(redis_url: str) -> Iterator[Server]:
    Deployed.fixed = False
    server = Server(redis_url, queues=[Q], heartbeat_interval=0.2, shutdown_timeout=2)
    thread = threading.Thread(target=lambda: asyncio.run(server.arun(durable_mux())), daemon=True)
    thread.start()
    yield server
    server.stop()
    thread.join(10)


def _state(url: str, rid: str) -> str:
    with Inspector(url) as insp:
        return insp.durable_run(Q, rid).state


def _seed(url: str) -> None:
    with Client(url) as c:
        c.start("order", 1, id="o1", queue=Q)
        c.start("waiter", id="w1", queue=Q)
    wait_for(lambda: _state(url, "o1") == "failed" and _state(url, "w1") == "waiting")


def test_the_durable_api(redis_url: str, worker: Server) -> None:
    _seed(redis_url)
    with TestClient(create_app(redis_url), base_url="http://localhost") as web:
        listed = web.get(f"/api/queues/{Q}/durable").json()
        assert listed["total"] == 2 and {r["id"] for r in listed["runs"]} == {"o1", "w1"}
        failed = web.get(f"/api/queues/{Q}/durable?state=failed&function=order").json()
        assert [r["id"] for r in failed["runs"]] == ["o1"] and "declined" in failed["runs"][0]["error"]
        assert web.get(f"/api/queues/{Q}/durable?state=asleep").status_code == 400
        run = web.get(f"/api/queues/{Q}/durable/o1").json()["run"]
        assert [(e["kind"], e["name"], e["status"]) for e in run["timeline"]] == [
            ("start", "", ""), ("step", "reserve", "completed"), ("step", "charge", "failed"), ("failed", "", "failed")]
        assert web.get(f"/api/queues/{Q}/durable/nope").status_code == 404
        csrf = {"X-CSRF-Token": web.cookies.get("asynqpy_csrf") or ""}
        got = web.post(f"/api/queues/{Q}/durable/w1/signal", json={"name": "go", "payload": 5}, headers=csrf)
        assert got.json() == {"response": "delivered"}, got.text
        assert Client(redis_url).result(DurableRun("w1", Q), timeout=20) == 5
        assert web.post(f"/api/queues/{Q}/durable/w1/resume", headers=csrf).status_code == 409  # completed
        assert web.post(f"/api/queues/{Q}/durable/w1/cancel", headers=csrf).status_code == 409
        html = web.get(f"/queues/{Q}/durable/o1").text
        assert "declined &lt;script&gt;" in html and "<script>alert" not in html  # shown as text


@pytest.mark.slow
def test_durable_runs_and_a_timeline_in_a_browser(redis_url: str, worker: Server, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _seed(redis_url)
    console = Console(redis_url)
    try:
        browser.get(console.url + f"/queues/{Q}")
        click(browser, "#durable-link")
        wait_for(lambda: _read(browser, 'tr[data-id="o1"] td.state') == "failed")
        assert _read(browser, 'tr[data-id="w1"] td.state') == "waiting" and _read(browser, "#total") == "2"
        shoot(browser, "durable-runs")
        browser.find_element(By.LINK_TEXT, "failed").click()  # only the failed ones
        wait_for(lambda: _read(browser, "#total") == "1")
        click(browser, 'tr[data-id="o1"] a')
        wait_for(lambda: _read(browser, '#detail td[data-k="state"]') == "failed")
        assert _read(browser, '#timeline tr[data-name="charge"] td[data-k="status"]') == "failed"
        assert "declined" in _read(browser, '#timeline tr[data-name="charge"] td.payload')
        assert _read(browser, "#cancel", "disabled") is not None
        shoot(browser, "durable-run")
        Deployed.fixed = True  # the fix is deployed
        browser.find_element(By.ID, "resume").click()
        browser.switch_to.alert.accept()
        wait_for(lambda: _read(browser, "#message") == 'done: "resumed"')
        wait_for(lambda: _state(redis_url, "o1") == "completed")
        browser.refresh()
        wait_for(lambda: _read(browser, '#detail td[data-k="state"]') == "completed")
        assert _read(browser, '#timeline tr[data-name="charge"] td[data-k="status"]') == "completed"
        assert _read(browser, '#detail td[data-k="result"]') == "10"
        assert _read(browser, "#resume", "disabled") is not None

        browser.get(console.url + f"/queues/{Q}/durable/w1")
        wait_for(lambda: _read(browser, '#detail td[data-k="state"]') == "waiting")
        browser.find_element(By.ID, "cancel").click()
        browser.switch_to.alert.accept()
        wait_for(lambda: _read(browser, "#message") == 'done: "cancelled"')
        browser.refresh()
        wait_for(lambda: _read(browser, '#detail td[data-k="state"]') == "cancelled")
        assert [e["kind"] for e in browser.execute_script(
            "return Array.from(document.querySelectorAll('#timeline tbody tr')).map(r => ({kind: r.dataset.kind}))")
        ] == ["start", "wait", "cancelled"]
    finally:
        console.stop()
