"""The web console in a real browser: headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium with the system's driver: nothing is downloaded) against a real redis-server
and a running worker. The overview's counts change as tasks run, without a reload; a queue page
pages; an action works; a read-only console shows no action and refuses a forged one; payloads
are shown as text, never run; a task is enqueued (bad input refused on the page), edited,
duplicated, archived with others by checkboxes, found by search; a periodic entry paused and run;
the per-day chart and the Redis page shown. The sessions take screenshots: ``ASYNQPY_SCREENSHOTS=1``
saves docs/web.md's into docs/screenshots (another value: that directory); unset, none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redisproc import free_port

from asynqpy import Client, Inspector, InvalidArgumentError

pytestmark = [pytest.mark.real, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def _need_browser() -> None:
    if CHROMIUM and DRIVER:
        return
    if os.environ.get("ASYNQPY_REQUIRE_REAL"):
        pytest.fail("chromium and chromium-driver are not installed (scripts/test installs them with apt-get)")
    pytest.skip("chromium and chromium-driver are not installed")


class Console:
    """``create_app`` served by uvicorn in a thread on a free loopback port."""

    def __init__(self, redis_url: str, **options: Any) -> None:
        import uvicorn

        from asynqpy.web import create_app

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(redis_url, refresh=0.5, **options), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "the console did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _chromium(*extra: str) -> Iterator[Any]:
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
                "--disable-gpu", "--no-first-run", *extra):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from _chromium()


REBOUND = "rebound.example"


@pytest.fixture
def rebound_browser() -> Iterator[Any]:
    """Chromium for which rebound.example resolves to 127.0.0.1: the state a DNS-rebinding
    attacker brings about (its page was loaded from its own server, then its name's short-lived
    DNS record changed to the loopback address)."""
    yield from _chromium(f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1")


def _alert_text(browser: Any) -> str | None:
    """The open alert's text, None while none is open."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return str(browser.switch_to.alert.text)
    except NoAlertPresentException:
        return None


def _ids(browser: Any, rows: str) -> list[str]:
    """The data-id of each row, read in one script call: read one by one (a round trip to the
    driver each), a loaded machine straddled the page's live refresh on every try (the rows read
    were replaced: stale), and the wait ran out (seen in CI)."""
    return list(browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(r => r.getAttribute('data-id'))", rows))


def _read(browser: Any, css: str, what: str = "text") -> Any:
    """What ``css`` selects holds, read in one script call (None if nothing matches): its text,
    whether it is checked ("checked"), or an attribute. Found, then read (two round trips to the
    driver), an element of a page that refreshes itself could be replaced in between: stale (seen
    in CI on the task page)."""
    return browser.execute_script(
        "const e = document.querySelector(arguments[0]); if (!e) return null;"
        " return arguments[1] === 'text' ? e.textContent.trim() : arguments[1] === 'checked' ? e.checked"
        " : e.getAttribute(arguments[1]);", css, what)


def wait_for(pred: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = pred()
        except Exception:  # noqa: BLE001 - the page is still changing
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in the browser"
        time.sleep(0.1)


def click(browser: Any, css: str) -> None:
    """Click the element ``css`` selects, again if a live update replaced it meanwhile."""
    from selenium.webdriver.common.by import By

    wait_for(lambda: browser.find_element(By.CSS_SELECTOR, css).click() or True)


def reloading(browser: Any, act: Callable[[], None]) -> None:
    """Do ``act`` (a click on a button of class ``reload``, and the answer to its prompt), then wait
    for the reload its page does 0.3 s after the answer (static/app.js): the page's live refresh
    can show the change before it, and the next step's click or prompt was lost to that reload
    (Chrome aborts an open prompt, "aborted by navigation": seen in CI)."""
    browser.execute_script("window.beforeReload = true")
    act()
    wait_for(lambda: browser.execute_script("return document.readyState === 'complete' && !window.beforeReload"))


def _worker(redis_url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "faults"), "ASYNQPY_RECORDER_URL": redis_url}
    return subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "worker", "fault_workers:mux", "-q", "live",
                             "--concurrency", "2", "--redis-url", redis_url], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def shoot(browser: Any, name: str) -> None:
    """Save a screenshot of the page as ``name``.png, only when asked (CI stays fast):
    ``ASYNQPY_SCREENSHOTS=1`` into docs/screenshots (the ones docs/web.md shows), another value
    into that directory."""
    where = os.environ.get("ASYNQPY_SCREENSHOTS") or ""
    if not where:
        return
    shots = ROOT / "docs" / "screenshots" if where == "1" else Path(where)
    shots.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(shots / f"{name}.png"))


def test_the_console_in_a_browser(redis_url: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By


    with Client(redis_url) as c:
        c.enqueue_many([("job", {"ms": 150}) for _ in range(24)], queue="live")
        for i in range(45):
            c.enqueue("email", {"n": i}, queue="paged", task_id=f"p{i:02d}")
        c.enqueue("email", {"to": "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">"},
                  queue="paged", task_id="xss", process_in=600)
    console = Console(redis_url)
    worker = None
    try:
        browser.get(console.url + "/")
        cell = 'tr[data-queue="live"] td[data-k="pending"]'
        wait_for(lambda: browser.find_element(By.CSS_SELECTOR, cell).text == "24")  # (rows refresh live)
        worker = _worker(redis_url)
        # live counts: the worker drains the queue, the page follows without a reload
        wait_for(lambda: int(browser.find_element(By.CSS_SELECTOR, cell).text) < 24)
        wait_for(lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="live"] td[data-k="processed_total"]')
                 .text not in ("", "0"))
        wait_for(lambda: browser.find_element(By.CSS_SELECTOR, cell).text == "0", timeout=30)
        assert browser.execute_script("return performance.getEntriesByType('navigation').length") == 1

        # a queue page pages
        browser.get(console.url + "/queues/paged?state=pending&size=20")
        wait_for(lambda: _ids(browser, "#tasks tbody tr")
                 == [f"p{i:02d}" for i in range(20)])  # (a live update may replace the rows as they are read)
        browser.find_element(By.ID, "next").click()
        wait_for(lambda: browser.find_element(By.ID, "page-no").text == "2")
        wait_for(lambda: _ids(browser, "#tasks tbody tr")
                 == [f"p{i:02d}" for i in range(20, 40)])  # (a live update may replace the rows as they are read)

        # an action: archive a task from its row; the row leaves the pending list
        click(browser, 'tr[data-id="p25"] button[data-action="archive"]')
        wait_for(lambda: not browser.find_elements(By.CSS_SELECTOR, 'tr[data-id="p25"]'))
        with Inspector(redis_url) as insp:
            assert insp.task_info("paged", "p25").state.value == "archived"

        # a payload is text, never markup that runs
        browser.get(console.url + "/queues/paged/tasks/xss")
        assert "<script>window.pwned=1</script>" in _read(browser, "#payload")
        updates = int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-updates") or 0)
        wait_for(lambda: int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-updates") or 0) > updates)
        assert browser.execute_script("return window.pwned") is None  # (after a live update too)
        browser.get(console.url + "/queues/paged?state=scheduled")
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, 'tr[data-id="xss"]'))
        assert browser.execute_script("return window.pwned") is None
    finally:
        console.stop()
        if worker is not None:
            worker.terminate()
            worker.wait(15)


def test_a_read_only_console_in_a_browser(redis_url: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    with Client(redis_url) as c:
        c.enqueue("email", 1, queue="ro", task_id="keep")
    console = Console(redis_url, read_only=True)
    try:
        browser.get(console.url + "/queues/ro?state=pending")
        assert browser.find_element(By.ID, "read-only").text == "read-only"
        assert browser.find_elements(By.CSS_SELECTOR, "button.act") == []
        status = browser.execute_async_script("""
            const done = arguments[arguments.length - 1];
            document.cookie = "asynqpy_csrf=forged; path=/";
            const send = (url, body) => fetch(url, {method: "POST", headers: {"Content-Type": "application/json",
                  "X-CSRF-Token": "forged"}, body: JSON.stringify(body)}).then(r => r.status);
            Promise.all([send("/api/queues/ro/actions", {action: "delete", ids: ["keep"]}),
                         send("/api/tasks", {type: "x", queue: "ro"}),
                         send("/api/queues/ro/tasks/keep/edit", {max_retry: 1}),
                         send("/api/queues/ro/scheduler/e/pause", {})]).then(done, e => done(String(e)));""")
        assert status == [403, 403, 403, 403]
        browser.get(console.url + "/enqueue")
        assert browser.find_elements(By.ID, "enqueue") == [] and browser.find_elements(By.ID, "nav-enqueue") == []
        with Inspector(redis_url) as insp:
            assert insp.task_info("ro", "keep").state.value == "pending" and insp.queue_info("ro").size == 1
            assert insp.task_info("ro", "keep").max_retry == 25
    finally:
        console.stop()


def test_the_pages_write_times_and_latency_as_the_cli(redis_url: str, browser: Any) -> None:
    """The page's script (live updates) formats durations, latency and times with the same
    functions as asynqpy/core/text/humanize.py (the CLI's): compared on the same inputs in Chromium;
    the overview's waiting and blocked cells follow live."""
    from datetime import datetime, timedelta, timezone

    from selenium.webdriver.common.by import By

    from asynqpy.core.text import humanize

    with Client(redis_url) as c:
        c.enqueue("x", None, queue="idle", process_in=600)
    console = Console(redis_url)
    try:
        browser.get(console.url + "/")
        now = datetime(2026, 11, 23, 10, 0, 0, 250_000, tzinfo=timezone.utc)
        seconds = [0, 0.04, 0.05, 1.25, 9.94, 9.96, 10, 59.5, 59.94, 59.96, 60, 61.7, 599, 3599.9, 3600, 86399,
                   86400, 10 * 86400 - 1, 10 * 86400, 999 * 86400]
        offsets = [-s for s in seconds] + [s for s in seconds if s]
        times = [(now + timedelta(seconds=o)).isoformat() for o in offsets]
        got = browser.execute_script("""
            const [secs, times, now] = arguments;
            return [secs.map((s) => duration(s)), secs.map((s) => latency(1, s)), secs.map((s) => latency(0, s)),
                    times.map((t) => ago(t, now)), times.map((t) => when(t, now))];""",
                                     seconds, times, now.timestamp() * 1000)
        assert got == [[humanize.duration(x) for x in seconds], [humanize.latency(1, x) for x in seconds],
                       ["-"] * len(seconds),
                       [humanize.ago(datetime.fromisoformat(t), now) for t in times],
                       [f"{humanize.utc(datetime.fromisoformat(t))} ({humanize.ago(datetime.fromisoformat(t), now)})"
                        for t in times]]
        with Client(redis_url) as c:
            c.enqueue("charge", 1, queue="keyed", key="k1")
            c.enqueue("charge", 2, queue="keyed", key="k1")
            parent = c.enqueue("p", None, queue="keyed", process_in=600)
            c.enqueue("report", None, queue="keyed", after=[parent.id])
        cell = lambda k: browser.find_element(By.CSS_SELECTOR, f'tr[data-queue="keyed"] td[data-k="{k}"]').text  # noqa: E731
        wait_for(lambda: (cell("pending"), cell("blocked"), cell("waiting")) == ("1", "1", "1"))
        wait_for(lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="idle"] td[data-k="latency"]').text == "-")
    finally:
        console.stop()


def test_a_rebound_name_is_refused_in_a_browser(redis_url: str, rebound_browser: Any) -> None:
    """DNS rebinding, in Chromium: a name that resolves to 127.0.0.1 reaches the console's socket,
    but the console answers only to its own names: the page and a script of that origin (what
    the attacker's page runs, same-origin with it, CSRF cookie and Origin included) get 400, read
    no payload and delete nothing; 127.0.0.1 and localhost work."""
    from selenium.webdriver.common.by import By

    with Client(redis_url) as c:
        c.enqueue("secret:job", {"card": "4111-0000"}, queue="victim", task_id="v1")
    console = Console(redis_url)
    browser = rebound_browser
    try:
        browser.get(f"http://{REBOUND}:{console.port}/")
        assert f"Host '{REBOUND}:{console.port}' is not a name of this console" in \
            browser.find_element(By.TAG_NAME, "body").text
        got = browser.execute_async_script("""
            const done = arguments[arguments.length - 1];
            (async () => {
              const read = await fetch('/api/queues/victim/tasks?state=pending');
              const body = await read.text();
              const token = (document.cookie.match(/asynqpy_csrf=([^;]+)/) || [])[1] || 'none';
              const del = await fetch('/api/queues/victim/states/pending/delete', {method: 'POST',
                  headers: {'X-CSRF-Token': token, 'Content-Type': 'application/json'}, body: '{}'});
              const put = await fetch('/api/tasks', {method: 'POST', headers: {'X-CSRF-Token': token,
                  'Content-Type': 'application/json'}, body: JSON.stringify({type: 'evil', queue: 'victim'})});
              return [location.host, read.status, body.includes('4111'), del.status, put.status];
            })().then(done, e => done(String(e)));""")
        assert got == [f"{REBOUND}:{console.port}", 400, False, 400, 400]
        for name in ("127.0.0.1", "localhost"):
            browser.get(f"http://{name}:{console.port}/")
            wait_for(lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="victim"] td[data-k="pending"]')
                     .text == "1")
        with Inspector(redis_url) as insp:
            assert insp.task_info("victim", "v1").state.value == "pending" and insp.queue_info("victim").size == 1
    finally:
        console.stop()


def test_processes_and_servers_in_a_browser(redis_url: str, browser: Any) -> None:
    """A process in error is found in its queue's list, repaired from its page (the page follows
    its status and history live), then removed; a server is quieted, resumed and resized from the
    servers page."""
    import asyncio

    from selenium.webdriver.common.by import By

    from asynqpy import Input, Process, ServeMux, Server, Step

    mux = ServeMux()

    @mux.process("payment")
    def payment(p: Process, i: Input) -> Step:
        if i.kind == "init":
            return Step(events=[{"created": i.args}], state={"status": "new", "amount": i.args}, timer=3600)
        if i.kind == "repair":
            return Step(events=["repaired"], state={**p.state, "status": "authorized"}, response="mended")
        if i.args == "authorize" and p.state["status"] == "new":
            raise ConnectionError("payment provider unreachable")
        return Step(events=[i.args], state={**p.state, "status": i.args + "d"}, response="ok")

    server = Server(redis_url, queues=["pay"], heartbeat_interval=0.2, shutdown_timeout=2, name="web-w1")
    thread = threading.Thread(target=lambda: asyncio.run(server.arun(mux)), daemon=True)
    thread.start()
    console = Console(redis_url)
    try:
        with Client(redis_url) as c:
            for n in range(3):
                c.start_process("payment", f"pay-{n}", 10 * (n + 1), queue="pay")
            with pytest.raises(Exception, match="unreachable"):
                c.call_process("pay-1", "authorize", queue="pay", timeout=10, max_retry=0)
        browser.get(console.url + "/queues/pay")
        browser.find_element(By.ID, "processes-link").click()
        wait_for(lambda: browser.find_element(By.CSS_SELECTOR, 'tr[data-id="pay-1"] td.status-error'))
        shoot(browser, "processes")
        browser.find_element(By.LINK_TEXT, "error").click()  # only the broken ones
        wait_for(lambda: [r.get_attribute("data-id") for r in
                          browser.find_elements(By.CSS_SELECTOR, "#processes tbody tr")] == ["pay-1"])
        assert _read(browser, "#total") == "1"
        click(browser, 'tr[data-id="pay-1"] a')
        cell = lambda k: browser.find_element(By.CSS_SELECTOR, f'#detail td[data-k="{k}"]').text  # noqa: E731
        wait_for(lambda: cell("status") == "error")
        wait_for(lambda: "unreachable" in cell("error") and cell("broken_by"))
        browser.find_element(By.ID, "repair").click()
        browser.switch_to.alert.accept()
        wait_for(lambda: browser.find_element(By.ID, "message").text == 'done: "mended"')
        wait_for(lambda: cell("status") == "running")
        assert browser.find_element(By.ID, "repair").get_attribute("disabled") is not None
        with Client(redis_url) as c:
            assert c.call_process("pay-1", "capture", queue="pay", timeout=10) == "ok"
        wait_for(lambda: '"capture"' in browser.find_element(By.ID, "history").text)  # live, no reload
        wait_for(lambda: '"captured"' in browser.find_element(By.ID, "state").text)
        shoot(browser, "process")
        browser.find_element(By.ID, "remove").click()
        browser.switch_to.alert.accept()
        wait_for(lambda: cell("status") == "removed")
        with Inspector(redis_url) as insp:
            listed = insp.processes("pay")[1]  # newest change first: the worker commits the inits in any order
            assert {p.id for p in listed} == {"pay-2", "pay-0"}
            assert [p.updated for p in listed] == sorted((p.updated for p in listed if p.updated), reverse=True)
        assert browser.execute_script("return performance.getEntriesByType('navigation').length") == 1

        browser.get(console.url + "/servers")
        row = f'tr[data-id="{server.server_id}"]'
        wait_for(lambda: browser.find_element(By.CSS_SELECTOR, f"{row} button").text == "quiet")
        click(browser, f"{row} button")  # (the list is refreshed live: a row read may be replaced meanwhile)
        wait_for(lambda: browser.find_element(By.ID, "message").text == "server: quiet")
        wait_for(lambda: browser.find_element(By.CSS_SELECTOR, f"{row} button").text == "resume")
        wait_for(lambda: "quiet" in browser.find_element(By.CSS_SELECTOR, row).text)
        click(browser, f"{row} button")
        wait_for(lambda: browser.find_element(By.CSS_SELECTOR, f"{row} button").text == "quiet")
        # resize it: the scale button asks for the number (a prompt) and the row shows it
        click(browser, f'{row} button[data-post$="/scale"]')
        prompt = browser.switch_to.alert
        prompt.send_keys("7")
        prompt.accept()
        wait_for(lambda: browser.find_element(By.ID, "message").text == "server: concurrency 7")
        wait_for(lambda: "/7" in browser.find_element(By.CSS_SELECTOR, row).text)
    finally:
        console.stop()
        server.stop()
        thread.join(15)


def test_acting_from_the_console_in_a_browser(redis_url: str, browser: Any) -> None:
    """One Chromium session acts from the console: enqueue (a bad JSON payload and a bad queue
    name are refused with the server's error on the page, nothing queued is lost), edit, duplicate,
    select tasks and archive them in one batch, search by type, search by payload and archive every
    match (the count in a question; "no" changes nothing), pause and run a periodic entry; the
    overview's per-day chart is drawn from the stored counters; times show their raw value on
    hover; the Redis page lists the slowlog."""
    from datetime import timedelta

    import redis
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from asynqpy.core.model.clock import Clock
    from asynqpy.core.spine.keys import queue_keys

    r = redis.Redis.from_url(redis_url)
    today = Clock().today()
    for back, done, failed in [(6, 120, 4), (5, 340, 12), (4, 280, 2), (3, 410, 30), (2, 390, 8), (1, 460, 5)]:
        r.set(queue_keys("ops").processed_on(today - timedelta(days=back)), done)
        r.set(queue_keys("ops").failed_on(today - timedelta(days=back)), failed)
    r.set(queue_keys("ops").processed, 2000)  # (the lifetime totals, to match)
    r.set(queue_keys("ops").failed, 61)
    with Client(redis_url) as c:
        for i in range(6):
            c.enqueue("email", {"to": f"user{i}@example.com"}, queue="ops", task_id=f"e{i}")
    with Inspector(redis_url) as insp:
        insp.cron_add("nightly-report", "report", {"kind": "daily"}, cron="0 3 * * *", queue="ops")
    console = Console(redis_url)
    by = lambda css: browser.find_element(By.CSS_SELECTOR, css)  # noqa: E731
    slower_than = r.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    r.slowlog_reset()
    r.config_set("slowlog-log-slower-than", 0)  # (every command is logged: the Redis page has a slowlog to show)
    try:
        # the overview: the per-day chart from the stored counters (not what the page saw)
        browser.get(console.url + "/")
        day = (today - timedelta(days=3)).isoformat()
        assert _read(browser, f'#daily-chart g.day[data-date="{day}"]', "data-processed") == "410"
        assert len(browser.find_elements(By.CSS_SELECTOR, "#daily-chart g.day")) == 14
        wait_for(lambda: by('tr[data-queue="ops"] td[data-k="pending"]').text == "6")
        shoot(browser, "overview")

        # enqueue: bad input is refused with the server's message on the page; nothing is written
        browser.get(console.url + "/enqueue?queue=ops")
        by("#f-type").send_keys("invoice")
        payload = by("#f-payload")
        payload.clear()
        payload.send_keys('{"amount": 12,')
        by("#f-submit").click()
        wait_for(lambda: "not enqueued: payload is not valid JSON" in by("#form-error").text)
        shoot(browser, "enqueue")
        payload.clear()
        payload.send_keys('{"amount": 12}')
        queue = by("#f-queue")
        queue.clear()
        queue.send_keys("no spaces")
        by("#f-submit").click()
        wait_for(lambda: "invalid queue name 'no spaces'" in by("#form-error").text)
        with Inspector(redis_url) as insp:
            assert insp.queue_info("ops").size == 6 and insp.queues() == ["ops"]
        queue.clear()
        queue.send_keys("ops")
        options = by("#f-options")
        options.clear()
        options.send_keys('{"task_id": "inv-1", "max_retry": 2, "process_in": 3600}')
        by("#f-submit").click()
        wait_for(lambda: by("#task-id").text == "inv-1")
        assert _read(browser, '#detail td[data-k="state"]') == "scheduled"
        raw = '#detail td[data-k="next_process_at"] time'  # (the raw value on hover)
        title = _read(browser, raw, "title")
        assert title == _read(browser, raw, "datetime") and "T" in title

        # edit it: a new payload, due now
        by("#edit-box summary").click()
        edit = by("#e-payload")
        edit.clear()
        edit.send_keys('{"amount": 15}')
        by("#e-process_in").send_keys("0")
        by("#e-submit").click()
        wait_for(lambda: '"amount": 15' in by("#payload").text and by('#detail td[data-k="state"]').text == "pending")
        shoot(browser, "task")

        # duplicate it: the form comes filled; enqueue the copy
        by("#duplicate").click()
        wait_for(lambda: by("#f-type").get_attribute("value") == "invoice")
        assert '"max_retry": 2' in by("#f-options").get_attribute("value")
        by("#f-submit").click()
        wait_for(lambda: by("#task-id").text not in ("", "inv-1"))
        copy_id = _read(browser, "#task-id")
        assert '"amount": 15' in _read(browser, "#payload")

        # select three tasks (one by the header's box after a live update) and archive them in one batch
        browser.get(console.url + "/queues/ops?state=pending")
        click(browser, 'tr[data-id="e1"] input.pick')
        click(browser, 'tr[data-id="e2"] input.pick')
        updates = int(by("body").get_attribute("data-updates") or 0)
        wait_for(lambda: int(by("body").get_attribute("data-updates") or 0) > updates)  # (rows replaced)
        assert _read(browser, 'tr[data-id="e1"] input.pick', "checked") and _read(browser, "#selected-count") == "2"
        click(browser, 'tr[data-id="e3"] input.pick')
        shoot(browser, "queue")
        click(browser, 'button.bulk-act[data-action="archive"]')
        wait_for(lambda: by("#message").text == "archive: 3 done")
        wait_for(lambda: not browser.find_elements(By.CSS_SELECTOR, 'tr[data-id="e2"]'))
        with Inspector(redis_url) as insp:
            assert {t.id for t in insp.list_tasks("ops", "archived")} == {"e1", "e2", "e3"}
            assert insp.queue_info("ops").pending == 5  # e0, e4, e5, inv-1 and its copy

        # search by type
        by("#find-type").send_keys("invoice")
        by("#find button").click()
        wait_for(lambda: set(_ids(browser, "#found tbody tr"))
                 == {"inv-1", copy_id})
        # search by payload, then archive every match: the count in the question, "no" changes nothing
        by("#find-type").clear()
        by("#find-payload").send_keys("to=user4@example.com")
        by("#find button").click()
        wait_for(lambda: _ids(browser, "#found tbody tr") == ["e4"])
        Select(by("#search-action")).select_by_visible_text("archive")
        click(browser, "#search-act")
        wait_for(lambda: _alert_text(browser) == "archive 1 matching task(s) in queue ops?")
        browser.switch_to.alert.dismiss()
        wait_for(lambda: by("#message").text == "nothing done")
        click(browser, "#search-act")
        wait_for(lambda: _alert_text(browser) is not None)
        browser.switch_to.alert.accept()
        wait_for(lambda: by("#message").text.startswith("archive: 1 done"))
        with Inspector(redis_url) as insp:
            assert insp.task_info("ops", "e4").state.value == "archived"

        # a periodic entry: pause it, then run it now
        browser.get(console.url + "/scheduler")
        reloading(browser, lambda: click(browser, 'tr[data-entry="ops/nightly-report"] button[data-post$="/pause"]'))
        wait_for(lambda: by('tr[data-entry="ops/nightly-report"] td[data-k="paused"]').text == "yes")
        click(browser, 'tr[data-entry="ops/nightly-report"] button[data-post$="/run"]')
        wait_for(lambda: by("#message").text.startswith("enqueued task "))
        shoot(browser, "scheduler")
        with Inspector(redis_url) as insp:
            assert [e.paused for e in insp.scheduler_entries("ops")] == [True]
            assert insp.find_tasks("ops", task_type="report")[1]

        # a queue's tenants: pause one, give another a weight and a rate (prompts), from the page
        with Client(redis_url) as c:
            for t in ("acme", "globex"):
                c.enqueue_many([("report", i) for i in range(3)], queue="ops", tenant=t)
        browser.get(console.url + "/queues/ops")
        click(browser, "#tenants-link")
        wait_for(lambda: _ids(browser, "#tenants tbody tr") == ["acme", "globex"])
        reloading(browser, lambda: click(browser, 'tr[data-id="acme"] button[data-post$="/pause"]'))
        wait_for(lambda: by('tr[data-id="acme"] td.state').text == "paused")
        for action, value in (("weight", "3"), ("rate", "50/s")):

            def answer(action: str = action, value: str = value) -> None:
                click(browser, f'tr[data-id="globex"] button[data-post$="/{action}"]')
                prompt = browser.switch_to.alert
                prompt.send_keys(value)
                prompt.accept()

            reloading(browser, answer)
            wait_for(lambda: value.split("/")[0] in by('tr[data-id="globex"]').text)
        shoot(browser, "tenants")
        with Inspector(redis_url) as insp:
            got = {t.tenant: t for t in insp.tenants("ops")}
            assert got["acme"].paused and (got["globex"].weight, got["globex"].rate) == (3, 50.0)

        # the Redis page
        browser.get(console.url + "/redis")
        assert _read(browser, '#redis td[data-k="redis_version"]')
        assert browser.find_elements(By.CSS_SELECTOR, "#slowlog tbody tr")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#slowlog tbody tr")) == 10
        shoot(browser, "redis")
    finally:
        r.config_set("slowlog-log-slower-than", slower_than)
        console.stop()


def test_names_with_slashes_and_dots_act_on_themselves_in_a_browser(redis_url: str, browser: Any) -> None:
    """Issue 42 #16: a tenant named ``../../billing`` and a periodic entry named
    ``../../billing/states/archived``: their buttons' URLs carry each name as one path segment
    (``/`` encoded), so the browser resolves no dot segment and the action lands on the tenant
    and the entry, never on the queue ``billing``. Names that are only ``.`` or ``..`` are refused
    where they are made."""
    from selenium.webdriver.common.by import By

    evil = "../../billing"
    with Client(redis_url) as c:
        c.enqueue("invoice", 1, queue="billing")
        c.enqueue("invoice", 2, queue="billing", process_in=600)
        c.enqueue("report", 1, queue="shared", tenant=evil)
        c.enqueue("report", 2, queue="shared", tenant="acme")
    with Inspector(redis_url) as insp:
        insp.archive_task("billing", insp.list_tasks("billing", "scheduled")[0].id)
        insp.cron_add(evil + "/states/archived", "report", None, cron="0 3 * * *", queue="shared")
    console = Console(redis_url)
    try:
        browser.get(console.url + "/queues/shared/tenants")
        wait_for(lambda: _ids(browser, "#tenants tbody tr") == [evil, "acme"])
        post = browser.execute_script(
            "return Array.from(document.querySelectorAll('#tenants tbody tr')).find(r => r.getAttribute('data-id')"
            " === arguments[0]).querySelector('button[data-post$=\"/pause\"]').getAttribute('data-post')", evil)
        assert post == "/api/queues/shared/tenants/..%2F..%2Fbilling/pause"
        browser.execute_script(
            "window.beforeReload = true; Array.from(document.querySelectorAll('#tenants tbody tr')).find(r => "
            "r.getAttribute('data-id') === arguments[0]).querySelector('button[data-post$=\"/pause\"]').click()", evil)
        with Inspector(redis_url) as insp:
            wait_for(lambda: {t.tenant: t.paused for t in insp.tenants("shared")}.get(evil))
            assert not insp.queue_info("billing").paused
        # the button reloads its page 0.3 s after its answer: a navigation before that reload was
        # taken back by it (a loaded CI run found the tenants page where the scheduler's was asked for)
        wait_for(lambda: browser.execute_script("return document.readyState === 'complete' && !window.beforeReload"))

        browser.get(console.url + "/scheduler")
        post = wait_for(lambda: browser.find_element(By.CSS_SELECTOR, 'button[data-post$="/run"]').get_attribute(
            "data-post"))
        assert "%2F" in post

        def run_now() -> bool:
            browser.find_element(By.CSS_SELECTOR, 'button[data-post$="/run"]').click()
            return True

        wait_for(run_now)
        wait_for(lambda: browser.find_element(By.ID, "message").text.startswith("enqueued task "))
        with Inspector(redis_url) as insp:
            assert insp.queue_info("billing").archived == 1  # the archived task was not run
            assert insp.find_tasks("shared", task_type="report")[1]
    finally:
        console.stop()
    with Client(redis_url) as c, Inspector(redis_url) as insp:
        for name in (".", ".."):
            with pytest.raises(InvalidArgumentError, match="path segments"):
                c.enqueue("report", 3, queue="shared", tenant=name)
            with pytest.raises(InvalidArgumentError, match="path segments"):
                insp.cron_add(name, "report", None, cron="0 3 * * *", queue="shared")
        assert insp.queue_info("shared").pending == 3  # nothing queued was lost (two tasks, one run now)
