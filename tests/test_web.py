"""The web console's API and pages, in-process (FastAPI's TestClient) against a real redis-server:
what each endpoint returns for known work, actions, CSRF, read-only, authentication, escaping,
the CLI's refusals. The browser tests are in tests/test_web_browser.py."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from asynqpy import Client, Inspector, InvalidArgumentError, TaskState
from asynqpy.web import Auth, create_app

pytestmark = pytest.mark.real
Q = "wq"
PQ = "wp"  # the durable processes' queue
XSS = "<script>window.pwned=1</script><img src=x onerror=alert(1)>"


@pytest.fixture
def seeded(redis_url: str) -> str:
    with Client(redis_url) as c:
        for i in range(45):
            c.enqueue("email", {"n": i}, queue=Q, task_id=f"p{i:02d}")
        c.enqueue("email", {"to": XSS}, queue=Q, task_id="xss", process_in=600, headers={"h": XSS})
        c.enqueue("email", None, queue="other")
    return redis_url


@pytest.fixture
def web(seeded: str) -> Iterator[TestClient]:
    with TestClient(create_app(seeded), base_url="http://localhost") as tc:  # (a name the console answers to)
        tc.get("/")  # the CSRF cookie
        yield tc


def _csrf(tc: TestClient) -> dict[str, str]:
    return {"X-CSRF-Token": tc.cookies.get("asynqpy_csrf") or ""}


def test_api_reads_queues_tasks_and_one_task(web: TestClient) -> None:
    queues = {q["queue"]: q for q in web.get("/api/queues").json()}
    assert queues[Q]["pending"] == 45 and queues[Q]["scheduled"] == 1 and queues["other"]["pending"] == 1
    one = web.get(f"/api/queues/{Q}").json()
    assert one["info"]["size"] == 46 and len(one["history"]) == 7
    page = web.get(f"/api/queues/{Q}/tasks", params={"state": "pending", "page": 2, "size": 20}).json()
    assert page["total"] == 45 and [t["id"] for t in page["tasks"]] == [f"p{i:02d}" for i in range(20, 40)]
    t = web.get(f"/api/queues/{Q}/tasks/xss").json()
    assert t["task"]["payload"] == {"to": XSS} and t["task"]["state"] == "scheduled"
    assert [e["event"] for e in t["events"]] == ["scheduled"]
    assert web.get("/api/servers").json() == [] and web.get("/api/scheduler").json() == []
    assert web.get("/api/redis").json()["redis_version"]
    spec = web.get("/api/openapi.json").json()
    assert {"/api/queues", "/api/queues/{queue}/tasks", "/api/queues/{queue}/actions"} <= set(spec["paths"])
    assert 'asynqpy_tasks_enqueued_total{queue="wq",state="pending"} 45.0' in web.get("/metrics").text


def test_api_errors_are_json_with_the_right_status(web: TestClient) -> None:
    r = web.get("/api/queues/nope/tasks/zz")
    assert r.status_code == 404 and "not found" in r.json()["error"]
    r = web.get(f"/api/queues/{Q}/tasks", params={"state": "sideways"})
    assert r.status_code == 400 and "state" in r.json()["error"]
    r = web.post(f"/api/queues/{Q}/actions", json={"action": "explode", "ids": ["p00"]}, headers=_csrf(web))
    assert r.status_code == 400 and "action must be one of" in r.json()["error"]
    r = web.post(f"/api/queues/{Q}/actions", json={"action": "run", "ids": []}, headers=_csrf(web))
    assert r.status_code == 400
    assert web.get(f"/api/queues/{Q}").json()["info"]["pending"] == 45  # nothing queued was lost


def test_actions_need_the_csrf_token_and_same_origin(web: TestClient, seeded: str) -> None:
    assert web.post(f"/api/queues/{Q}/pause").status_code == 403
    assert web.post(f"/api/queues/{Q}/pause", headers={"X-CSRF-Token": "forged"}).status_code == 403
    r = web.post(f"/api/queues/{Q}/pause", headers={**_csrf(web), "Origin": "http://evil.example"})
    assert r.status_code == 403 and "cross-origin" in r.json()["error"]
    assert web.post(f"/api/queues/{Q}/pause", headers=_csrf(web)).json() == {"changed": True}
    r = web.post(f"/api/queues/{Q}/actions", json={"action": "archive", "ids": ["p00", "p01", "gone"]},
                 headers=_csrf(web)).json()
    assert r["results"]["p00"] == "ok" and r["results"]["p01"] == "ok" and "not found" in r["results"]["gone"]
    assert web.post(f"/api/queues/{Q}/states/archived/run", headers=_csrf(web)).json() == {"count": 2}
    assert web.post(f"/api/queues/{Q}/actions", json={"action": "delete", "ids": ["xss"]},
                    headers=_csrf(web)).json()["results"] == {"xss": "ok"}
    with Inspector(seeded) as insp:
        info = insp.queue_info(Q)
        assert (info.paused, info.pending, info.scheduled, info.archived) == (True, 45, 0, 0)


def test_read_only_refuses_every_action_and_shows_none(seeded: str) -> None:
    with Client(seeded) as c:
        c.start_process("acct", "ro1", queue=PQ)
    with TestClient(create_app(seeded, read_only=True), base_url="http://localhost") as tc:
        page = tc.get(f"/queues/{Q}?state=pending").text
        assert "read-only" in page and "button class=\"act\"" not in page and "data-action" not in page
        assert 'class="pick"' not in page and 'id="nav-enqueue"' not in page
        with Inspector(seeded) as insp:
            insp.cron_add("ro-entry", "t", every=60, queue=Q)
        with Client(seeded) as c:
            c.enqueue("t", None, queue=Q, tenant="ro-t")
        for path in (f"/queues/{PQ}/processes/ro1", "/servers", "/scheduler", f"/queues/{Q}/tasks/p00", "/enqueue",
                     f"/queues/{Q}/tenants"):
            text = tc.get(path).text
            assert "class=\"act" not in text and "<form id=" not in text and 'id="duplicate"' not in text, path
        assert "asynqpy_csrf" not in tc.cookies
        for path, body in [(f"/api/queues/{Q}/pause", None),
                           (f"/api/queues/{Q}/actions", {"action": "delete", "ids": ["p00"]}),
                           (f"/api/queues/{PQ}/processes/ro1/remove", None), ("/api/servers/any/stop", None),
                           ("/api/tasks", {"type": "x", "queue": Q}), (f"/api/queues/{Q}/tasks/p00/duplicate", None),
                           (f"/api/queues/{Q}/tasks/p00/edit", {"max_retry": 1}),
                           (f"/api/queues/{Q}/scheduler/ro-entry/pause", None),
                           (f"/api/queues/{Q}/scheduler/ro-entry/remove", None),
                           (f"/api/queues/{Q}/tenants/ro-t/pause", None)]:
            r = tc.post(path, json=body, headers={"X-CSRF-Token": "x"}, cookies={"asynqpy_csrf": "x"})
            assert r.status_code == 403 and r.json() == {"error": "this console is read-only"}
    with Inspector(seeded) as insp:
        assert insp.queue_info(Q).pending == 46 and not insp.queue_info(Q).paused  # (45 and the tenant's)
        assert insp.queue_info(PQ).pending == 1  # the process's init input, and no remove input
        assert insp.task_info(Q, "p00").max_retry == 25
        assert [(e.name, e.paused) for e in insp.scheduler_entries(Q)] == [("ro-entry", False)]
        assert [t.paused for t in insp.tenants(Q)] == [False]


def test_authentication_basic_and_bearer(seeded: str) -> None:
    with TestClient(create_app(seeded, auth=Auth.parse("basic:ops:s3cret")), base_url="http://localhost") as tc:
        r = tc.get("/api/queues")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
        assert tc.get("/api/queues", auth=("ops", "wrong")).status_code == 401
        assert tc.get("/api/queues", auth=("ops", "s3cret")).status_code == 200
        assert tc.get("/static/app.js").status_code == 401  # everything is guarded
    with TestClient(create_app(seeded, auth=Auth.parse("bearer:tok-123")), base_url="http://localhost") as tc:
        assert tc.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert tc.get("/", headers={"Authorization": "Bearer tok-123"}).status_code == 200
        basic = base64.b64encode(b"tok-123:").decode()
        assert tc.get("/", headers={"Authorization": f"Basic {basic}"}).status_code == 401
    for bad in ("", "basic:onlyuser", "basic::pw", "bearer:", "digest:x"):
        with pytest.raises(InvalidArgumentError, match="auth must be"):
            Auth.parse(bad)


def test_an_invalid_queue_set_member_leaves_every_view_working(web: TestClient, seeded: str) -> None:
    """One bad member of asynqpy:queues used to turn the overview, /api/queues and /metrics into
    400s: it is skipped, the valid queues show."""
    import redis

    redis.Redis.from_url(seeded).sadd("asynqpy:queues", "bad queue", b"\xff")
    assert sorted(q["queue"] for q in web.get("/api/queues").json()) == ["other", Q]
    r = web.get("/")
    assert r.status_code == 200 and f'data-queue="{Q}"' in r.text and "bad queue" not in r.text
    r = web.get("/metrics")
    assert r.status_code == 200 and f'asynqpy_queue_size{{queue="{Q}"}} 46.0' in r.text and "bad" not in r.text


def test_a_stored_entry_with_a_huge_every_is_listed_not_a_500(web: TestClient, seeded: str) -> None:
    """An entry stored with every=1e20 (before every= was bounded) made /scheduler and
    /api/scheduler answer 500 (OverflowError): it is listed."""
    import redis

    from asynqpy.core.cron.entries import Entry, encode_entry
    from asynqpy.core.spine.keys import queue_keys

    with Inspector(seeded) as insp:
        insp.cron_add("fine", "t", every=60, queue=Q)
    redis.Redis.from_url(seeded).hset(queue_keys(Q).cron, "far", encode_entry(Entry("far", "t", None, Q, every=1e20)))
    assert sorted(e["entry"]["name"] for e in web.get("/api/scheduler").json()) == ["far", "fine"]
    r = web.get("/scheduler")
    assert r.status_code == 200 and "every 1e+20s" in r.text and "fine" in r.text


def test_paging_parameters_out_of_range_are_400_with_a_message(web: TestClient, seeded: str) -> None:
    """A page number past Redis's integers was a 500 (Redis refused the index): every paged route
    and parameter answers 400 {"error": ...} naming the parameter, and nothing changes."""
    with Client(seeded) as c:
        c.start_process("acct", "pp1", queue=PQ)
    huge = "99999999999999999999"
    for path, name in [(f"/api/queues/{Q}/tasks?state=pending&page={huge}", "page"),
                       (f"/api/queues/{Q}/tasks?state=scheduled&page={huge}", "page"),
                       (f"/api/queues/{Q}/tasks?size={huge}", "size"),
                       (f"/api/queues/{Q}/tasks?page=0", "page"),
                       (f"/queues/{Q}?page={huge}", "page"),
                       (f"/queues/{Q}?state=archived&page={huge}", "page"),
                       (f"/queues/{Q}?size={huge}", "size"),
                       (f"/api/queues/{Q}/tasks/p00?events={huge}", "events"),
                       (f"/api/queues/{Q}?days={huge}", "days"),
                       (f"/api/queues/{PQ}/processes?page={huge}", "page"),
                       (f"/api/queues/{PQ}/processes?page={huge}&status=error", "page"),
                       (f"/api/queues/{PQ}/processes?size={huge}", "size"),
                       (f"/queues/{PQ}/processes?page={huge}", "page"),
                       (f"/api/queues/{PQ}/processes/pp1?first={huge}", "first"),
                       (f"/api/queues/{PQ}/processes/pp1?count={huge}", "count"),
                       (f"/api/queues/{PQ}/processes/pp1?first=x", "first"),
                       (f"/queues/{PQ}/processes/pp1?first={huge}", "first"),
                       (f"/queues/{PQ}/processes/pp1?count={huge}", "count")]:
        r = web.get(path)
        assert r.status_code == 400 and r.json()["error"].startswith(name), (path, r.status_code, r.text)
    far = web.get(f"/api/queues/{Q}/tasks", params={"page": 10**15 // 30 + 1}).json()  # the last page allowed
    assert far["tasks"] == [] and far["total"] == 45
    assert web.get(f"/api/queues/{Q}").json()["info"]["pending"] == 45


REBOUND = "rebound.example"


def test_a_foreign_host_header_is_refused_dns_rebinding(seeded: str) -> None:
    """DNS rebinding: a page of another site whose name now resolves to 127.0.0.1 talks to the
    console with its own name as Host (and as Origin, so the CSRF checks pass). Only the allowed
    names are answered: the loopback ones by default; every other Host gets 400 saying what to do,
    for every route (static files, API, actions), and nothing is read or changed."""
    with TestClient(create_app(seeded), base_url=f"http://{REBOUND}:8080") as tc:
        for path in ("/", f"/api/queues/{Q}/tasks?state=pending", "/static/app.js", "/api/openapi.json", "/metrics"):
            r = tc.get(path)
            assert r.status_code == 400, path
            assert r.json()["error"] == (f"Host '{REBOUND}:8080' is not a name of this console (DNS rebinding "
                                         "protection); it answers to localhost, 127.0.0.1, [::1]: add a name with "
                                         "asynqpy web --allowed-host NAME or create_app(allowed_hosts=[...])"), path
            assert "p00" not in r.text and r.headers["x-frame-options"] == "DENY", path
        tc.cookies.set("asynqpy_csrf", "t")
        r = tc.post(f"/api/queues/{Q}/states/pending/delete", headers={"X-CSRF-Token": "t",
                                                                      "Origin": f"http://{REBOUND}:8080"})
        assert r.status_code == 400
        for host in ("", "a b", "[::1"):  # no Host, or not one at all
            assert tc.get("/api/queues", headers={"host": host}).status_code == 400, host
    with TestClient(create_app(seeded), base_url="http://localhost") as tc:
        for host in ("localhost", "localhost:8080", "LOCALHOST:1", "127.0.0.1:8080", "[::1]:8080"):
            assert tc.get("/api/queues", headers={"host": host}).status_code == 200, host
    with Inspector(seeded) as insp:
        assert insp.queue_info(Q).pending == 45


def test_allowed_hosts_add_names_patterns_or_any(seeded: str) -> None:
    app = create_app(seeded, allowed_hosts=["Console.Example", "*.ops.example", "10.0.0.5", "::1"])
    with TestClient(app, base_url="http://console.example") as tc:
        for host, status in [("console.example:8080", 200), ("a.ops.example", 200), ("10.0.0.5:80", 200),
                             ("[::1]:8080", 200), ("localhost", 400), ("ops.example", 400), ("evil.example", 400)]:
            assert tc.get("/api/queues", headers={"host": host}).status_code == status, host
    with TestClient(create_app(seeded, allowed_hosts=["*"]), base_url=f"http://{REBOUND}") as tc:
        assert tc.get("/api/queues").status_code == 200
    for bad in (["evil.*"], ["a:80"], ["http://a"], [""], [], "localhost", [None]):
        with pytest.raises(InvalidArgumentError, match="allowed"):
            create_app(seeded, allowed_hosts=bad)  # type: ignore[arg-type]


def test_cli_web_answers_its_address_localhost_and_allowed_hosts(redis_url: str) -> None:
    """`asynqpy web` (uvicorn, a real socket): the bound address and localhost by default,
    --allowed-host adds names; a rebound name is refused."""
    import http.client
    import subprocess
    import sys
    import time

    from redisproc import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "web", "--port", str(port), "--allowed-host",
                             "console.example", "--redis-url", redis_url], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)

    def status(host: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/api/queues", headers={"Host": host})
        return conn.getresponse().status

    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                status("127.0.0.1")
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the console did not start"
                time.sleep(0.05)
        for host, code in [(f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200), ("console.example", 200),
                           (f"{REBOUND}:{port}", 400), (f"[::1]:{port}", 400)]:
            assert status(host) == code, host
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0].decode()
    assert "answers to Host 127.0.0.1, localhost, console.example" in out, out


def test_overview_latency_as_the_cli_waiting_blocked_columns_and_memory_in_the_api(web: TestClient,
                                                                                    seeded: str) -> None:
    """The console shows a queue's latency as the CLI does ('-' with nothing pending, 2m05s past a
    minute), the waiting and blocked counts on the overview (live too: the script fills every
    data-k cell), and /api/queues carries memory_bytes as `stats --json` does."""
    import re
    import time

    from asynqpy import FakeClock

    with Client(seeded, clock=FakeClock(int(time.time() * 1000) - 125_000)) as old:
        old.enqueue("t", None, queue="late")  # enqueued 125 s ago
    with Client(seeded) as c:
        c.enqueue("x", None, queue="idle", process_in=600)  # nothing pending
        c.enqueue("report", None, queue=Q, task_id="child", after=["p00"])  # waiting
        c.enqueue("charge", 1, queue="keyed", key="acct-1")
        c.enqueue("charge", 2, queue="keyed", key="acct-1")  # blocked behind the first
    html = web.get("/").text
    cell = lambda q, k: re.search(rf'<tr data-queue="{q}">.*?<td data-k="{k}">([^<]*)</td>', html, re.S)[1]  # noqa: E731
    assert cell("idle", "latency") == "-"
    assert re.fullmatch(r"2m0[5-9]s", cell("late", "latency")), cell("late", "latency")
    assert (cell(Q, "waiting"), cell(Q, "blocked"), cell("keyed", "blocked"), cell("keyed", "pending")) == \
        ("1", "0", "1", "1")
    assert "<th>waiting</th><th>blocked</th>" in html
    queues = {q["queue"]: q for q in web.get("/api/queues").json()}
    assert queues[Q]["memory_bytes"] > 0 and queues["keyed"]["blocked"] == 1 and queues[Q]["waiting"] == 1


def test_times_are_shown_for_people(web: TestClient, seeded: str) -> None:
    """Timestamps as the CLI shows them: lists say how long ago or in how long (the exact time and
    the raw value in the title), a task's page the UTC time and how long from now (the raw value
    in the title); the raw ISO 8601 value is never the text shown."""
    import re

    page = web.get(f"/queues/{Q}", params={"state": "scheduled"}).text
    assert re.search(r'<td><time datetime="([^"]+)" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · \1">in (9m5\ds|10m00s)'
                     r"</time></td>", page), page
    task = web.get(f"/queues/{Q}/tasks/xss").text
    raw = r'<time datetime="(\d{4}-[^"]+\+00:00)" title="\1">'
    assert re.search(rf'<td data-k="next_process_at">{raw}\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in (9m5\ds|10m00s)\)'
                     r"</time></td>", task), task
    assert re.search(rf"<tr><th>enqueued</th><td>{raw}\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d\.\ds ago\)</time></td>",
                     task)
    shown = re.sub(r"<[^>]*>", "", task.split('id="payload"')[0])  # (the text, without the tags' attributes)
    assert "+00:00" not in shown


def test_pages_escape_every_value(web: TestClient) -> None:
    for path in ("/", f"/queues/{Q}?state=scheduled", f"/queues/{Q}/tasks/xss", "/servers", "/scheduler"):
        r = web.get(path)
        assert r.status_code == 200, path
        assert "<script>window.pwned" not in r.text and "<img src=x" not in r.text, path
        assert "script-src 'self'" in r.headers["content-security-policy"]
    detail = web.get(f"/queues/{Q}/tasks/xss").text
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in detail
    assert "<script>" not in detail.replace('<script src="/static/app.js" defer></script>', "")


def test_queue_page_pages(web: TestClient) -> None:
    first = web.get(f"/queues/{Q}", params={"state": "pending", "size": 20}).text
    second = web.get(f"/queues/{Q}", params={"state": "pending", "size": 20, "page": 2}).text
    assert 'data-id="p00"' in first and 'data-id="p20"' not in first
    assert 'data-id="p20"' in second and 'data-id="p39"' in second and 'data-id="p40"' not in second
    assert "page <b id=\"page-no\">2</b> of <span id=\"pages\">3</span>" in second
    assert TaskState.TARGETED.value in first  # every state has its tab


def test_cli_web_refuses_unsafe_or_bad_settings(redis_url: str, tmp_path: Any) -> None:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    bad_auth = tmp_path / "auth"
    bad_auth.write_text("basic:nopassword")
    for args, message in [
        (["--host", "0.0.0.0"], "needs --auth-file or --auth-env"),
        (["--auth-file", str(tmp_path / "missing")], "cannot read --auth-file"),
        (["--auth-file", str(bad_auth)], "auth must be"),
        (["--auth-env", "ASYNQPY_NO_SUCH_VAR"], "is not set"),
        (["--allowed-host", "evil.example:8080"], "allowed host 'evil.example:8080' is not"),
        (["--allowed-host", "a b"], "allowed host 'a b' is not"),
        (["--allowed-host", "evil.*"], "allowed host 'evil.*' is not"),
    ]:
        res = CliRunner().invoke(main, ["web", *args, "--redis-url", redis_url])
        assert res.exit_code == 2 and res.stderr.startswith("asynqpy: error: ") and message in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1


def test_a_waiting_workflow_task_has_its_tab_its_parents_and_can_be_deleted(web: TestClient, seeded: str) -> None:
    with Client(seeded) as c:
        c.enqueue("report", None, queue=Q, task_id="child", after=["p00", ("other", c.enqueue("x", None,
                                                                                             queue="other").id)])
    page = web.get(f"/api/queues/{Q}/tasks", params={"state": "waiting"}).json()
    assert page["total"] == 1 and page["tasks"][0]["id"] == "child"
    t = web.get(f"/api/queues/{Q}/tasks/child").json()
    assert [p["id"] for p in t["task"]["parents"]] == ["p00", t["task"]["parents"][1]["id"]]
    assert t["task"]["parents"][0]["state"] == "waiting" and [e["event"] for e in t["events"]] == ["waiting"]
    html = web.get(f"/queues/{Q}", params={"state": "waiting"}).text
    assert "child" in html and 'data-action="delete"' in html
    res = web.post(f"/api/queues/{Q}/actions", json={"action": "delete", "ids": ["child"]}, headers=_csrf(web))
    assert res.json() == {"results": {"child": "ok"}}
    assert web.get(f"/api/queues/{Q}").json()["info"]["waiting"] == 0


def _serve_in_thread(url: str, mux: Any, **options: Any) -> tuple[Any, Any]:
    """A Server running in a thread of its own (the TestClient is synchronous). Its beat is 1 s:
    a server is live for 3 beats after its last, and at 0.2 s the 0.6 s lapsed on a loaded machine
    (the console said "no live server" between two of a test's requests); a control command's
    outcome and the new status are written at once, not at a beat."""
    import asyncio
    import threading

    from asynqpy import Server

    server = Server(url, **{"heartbeat_interval": 1.0, "shutdown_timeout": 2, **options})
    t = threading.Thread(target=lambda: asyncio.run(server.arun(mux)), daemon=True)
    t.start()
    return server, t


def _until(cond: Any, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_processes_listed_inspected_repaired_and_removed(web: TestClient, seeded: str) -> None:
    """Durable processes in the console: the listing and one process with its history (paged);
    repair of a process in error returns the processor's response, refused (409) for a running
    one; remove queues the removal; bad ids and unknown processes are clean errors."""
    from asynqpy import Input, Process, ServeMux, Step

    broken = {"yes": True}
    mux = ServeMux()

    @mux.process("acct")
    def acct(p: Process, i: Input) -> Step:
        if i.kind == "init":
            return Step(events=[{"opened": XSS}], state={"n": 0})
        if i.kind == "repair":
            broken["yes"] = False
            return Step(events=["repaired"], state=p.state, response="mended")
        if broken["yes"] and i.args == "fail":
            raise RuntimeError("ledger offline")
        return Step(events=[i.args], state={"n": p.state["n"] + 1}, response=p.state["n"] + 1)

    server, t = _serve_in_thread(seeded, mux, queues=[PQ])
    try:
        with Client(seeded) as c:
            for n in range(3):
                c.start_process("acct", f"a{n}", queue=PQ)
            for k in range(25):
                assert c.call_process("a0", f"e{k}", queue=PQ, timeout=10) == k + 1
            with pytest.raises(Exception, match="ledger offline"):
                c.call_process("a1", "fail", queue=PQ, timeout=10, max_retry=0)
        listing = web.get(f"/api/queues/{PQ}/processes", params={"size": 2}).json()
        assert listing["total"] == 3 and len(listing["processes"]) == 2
        assert listing["processes"][0]["id"] == "a1" and listing["processes"][0]["status"] == "error"
        one = web.get(f"/api/queues/{PQ}/processes/a0", params={"first": 1, "count": 5}).json()["process"]
        assert one["events"] == 26 and one["state"] == {"n": 25}
        assert [e["id"] for e in one["history"]] == [1, 2, 3, 4, 5] and one["history"][0]["data"] == {"opened": XSS}
        html = web.get(f"/queues/{PQ}/processes/a0", params={"first": 1, "count": 5}).text
        assert "&lt;script&gt;" in html and "<script>window" not in html and 'id="newer"' in html
        assert 'id="older"' not in html and 'href="/queues/wp/processes/a0?first=6&count=5"' in html
        latest = web.get(f"/queues/{PQ}/processes/a0", params={"count": 5}).text
        assert 'id="older"' in latest and 'id="newer"' not in latest and "&#34;e24&#34;" in latest
        assert "3 durable processes" in web.get(f"/queues/{PQ}").text
        broken = web.get(f"/api/queues/{PQ}/processes", params={"status": "error"}).json()
        assert broken["total"] == 1 and [p["id"] for p in broken["processes"]] == ["a1"]
        assert 'data-id="a0"' not in web.get(f"/queues/{PQ}/processes", params={"status": "error"}).text
        r = web.get(f"/api/queues/{PQ}/processes", params={"status": "sideways"})
        assert r.status_code == 400 and "status must be one of" in r.json()["error"]
        plist = web.get(f"/queues/{PQ}/processes").text
        assert 'class="status-error">error' in plist and "ledger offline" in plist

        r = web.post(f"/api/queues/{PQ}/processes/a0/repair", headers=_csrf(web))
        assert r.status_code == 409 and "not in error" in r.json()["error"]
        r = web.post(f"/api/queues/{PQ}/processes/a1/repair", json={"args": {"why": "ops"}}, headers=_csrf(web))
        assert r.status_code == 200 and r.json() == {"response": "mended"}
        assert web.get(f"/api/queues/{PQ}/processes/a1").json()["process"]["status"] == "running"
        assert web.post(f"/api/queues/{PQ}/processes/a2/remove").status_code == 403  # no CSRF token
        assert web.post(f"/api/queues/{PQ}/processes/a2/remove", headers=_csrf(web)).json() == {"queued": True}
        _until(lambda: web.get(f"/api/queues/{PQ}/processes/a2").status_code == 404)
        for path, status, text in [(f"/api/queues/{PQ}/processes/nope", 404, "no process"),
                                   (f"/api/queues/{PQ}/processes/a0?count=5000", 400, "count"),
                                   (f"/queues/{PQ}/processes/nope", 404, "no process")]:
            r = web.get(path)
            assert r.status_code == status and text in r.text, path
        r = web.post(f"/api/queues/{PQ}/processes/nope/remove", headers=_csrf(web))
        assert r.status_code == 404 and "no process" in r.json()["error"]
        assert web.get(f"/api/queues/{PQ}/processes").json()["total"] == 2
        assert web.get(f"/api/queues/{Q}").json()["info"]["pending"] == 45  # nothing else was touched
    finally:
        server.stop()
        t.join(15)


def test_servers_quieted_resumed_and_stopped_from_the_console(web: TestClient, seeded: str) -> None:
    from asynqpy import ServeMux

    server, t = _serve_in_thread(seeded, ServeMux(), queues=["idle"], name="console-w1")
    try:
        _until(lambda: [s["status"] for s in web.get("/api/servers").json()] == ["running"])
        from urllib.parse import quote

        page = web.get("/servers").text
        assert f'data-post="/api/servers/{quote(server.server_id)}/quiet"' in page and ">stop<" in page
        assert web.post(f"/api/servers/{server.server_id}/quiet").status_code == 403  # no CSRF token
        assert web.post("/api/servers/console-w1/quiet", headers=_csrf(web)).json() == {"ack": "quiet"}
        _until(lambda: [s["status"] for s in web.get("/api/servers").json()] == ["quiet"])
        assert f'data-post="/api/servers/{quote(server.server_id)}/resume"' in web.get("/servers").text
        assert web.post(f"/api/servers/{server.server_id}/resume", headers=_csrf(web)).json() == {"ack": "running"}
        assert f'data-post="/api/servers/{quote(server.server_id)}/scale"' in web.get("/servers").text
        assert web.post(f"/api/servers/{server.server_id}/scale?concurrency=3").status_code == 403  # no CSRF token
        r = web.post(f"/api/servers/{server.server_id}/scale?concurrency=3", headers=_csrf(web))
        assert r.json() == {"ack": "concurrency 3"}, r.text
        _until(lambda: [s["concurrency"] for s in web.get("/api/servers").json()] == [3])
        for bad in ("0", "x", "", "100001"):
            r = web.post(f"/api/servers/{server.server_id}/scale?concurrency={bad}", headers=_csrf(web))
            assert r.status_code == 400 and "concurrency must be an integer" in r.json()["error"], (bad, r.text)
        r = web.post(f"/api/servers/{server.server_id}/explode", headers=_csrf(web))
        assert r.status_code == 400 and "action must be one of" in r.json()["error"]
        r = web.post("/api/servers/no-such-server/stop", headers=_csrf(web))
        assert r.status_code == 404
        assert web.post(f"/api/servers/{server.server_id}/stop", headers=_csrf(web)).json() == {"ack": "stopping"}
        t.join(15)
        assert not t.is_alive()
    finally:
        server.stop()
        t.join(15)


@pytest.mark.real
def test_a_keyed_console_shows_entries_a_keyed_scheduler_does_not_fire(redis_url: str) -> None:
    key = b"k" * 32
    with Inspector(redis_url) as keyless, Inspector(redis_url, signing_key=key) as keyed:
        keyless.cron_add("planted", "evil", every=60, queue="wq")
        keyed.cron_add("ours", "ping", every=60, queue="wq")
    with TestClient(create_app(redis_url, signing_key=key), base_url="http://localhost") as tc:
        page = tc.get("/scheduler").text
        assert page.count("not fired: bad signature: the entry is not signed") == 1
        api = {e["entry"]["name"]: e["signature"] for e in tc.get("/api/scheduler").json()}
        assert api == {"ours": "verified", "planted": "bad signature: the entry is not signed"}


def test_health_probes_answer_any_host_without_credentials_and_tell_nothing_else(seeded: str) -> None:
    """GET /livez and /readyz for an orchestrator (docs/web.md): answered whatever the Host (a
    probe sends the pod's address) and without auth; every other route stays guarded."""
    from redisproc import free_port

    app = create_app(seeded, auth=Auth.parse("bearer:tok-123"))
    with TestClient(app, base_url=f"http://{REBOUND}:8080") as tc:
        assert tc.get("/livez").json() == {"live": True}
        r = tc.get("/readyz")
        assert r.status_code == 200 and r.json() == {"ready": True, "redis": True}
        assert r.headers["x-frame-options"] == "DENY"
        assert tc.get("/api/queues").status_code == 400  # any other route: the Host check
    with TestClient(app, base_url="http://localhost") as tc:
        assert tc.get("/api/queues").status_code == 401  # and the credentials
        assert tc.get("/readyz").status_code == 200
    with TestClient(create_app(f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.5"),
                    base_url="http://10.0.0.7:8080") as tc:  # Redis unreachable
        assert tc.get("/livez").status_code == 200
        r = tc.get("/readyz")
        assert r.status_code == 503 and r.json() == {"ready": False, "redis": False}


def test_enqueue_duplicate_and_edit_with_bad_input_refused_and_nothing_lost(web: TestClient, seeded: str) -> None:
    """The console enqueues (JSON values, or a form's JSON text), duplicates and edits; every bad
    input is a 400 saying what is wrong (a conflict 409), writes nothing and loses nothing queued;
    every new action needs the CSRF token and answers only to the console's names."""
    post = lambda path, body=None: web.post(path, json=body, headers=_csrf(web))  # noqa: E731
    r = post("/api/tasks", {"type": "report", "queue": Q, "payload": {"day": 1},
                            "options": {"task_id": "r1", "max_retry": 3, "priority": 8, "headers": {"by": "ops"},
                                        "process_at": "2099-01-01T00:00:00+00:00"}})
    assert r.status_code == 201 and r.json()["task"]["state"] == "scheduled", r.text
    r = post("/api/tasks", {"type": "report", "queue": "fresh", "payload_json": '{"day": 2}',
                            "options_json": '{"task_id": "r2", "timeout": 30}'})
    assert r.status_code == 201 and r.json()["task"]["payload"] == {"day": 2}
    for body, status, message in [
        ({"type": "x", "queue": Q, "payload_json": '{"a": '}, 400, "payload is not valid JSON: Expecting value (line 1"),
        ({"type": "x", "queue": Q, "options_json": "{bad"}, 400, "options is not valid JSON"),
        ({"type": "x", "queue": "no spaces please"}, 400, "invalid queue name 'no spaces please'"),
        ({"type": "x", "queue": Q, "options": {"max_retry": "many"}}, 400, "max_retry must be an int >= 0"),
        ({"type": "x", "queue": Q, "options": {"colour": "red"}}, 400, "unknown enqueue option: 'colour'"),
        ({"type": "x", "queue": Q, "options": {"process_at": "tomorrow"}}, 400, "process_at must be Unix seconds or"),
        ({"type": "x", "queue": Q, "options": [1]}, 400, "options must be a JSON object"),
        ({"type": "x", "queue": Q, "options": {"queue": "other"}}, 400, "give the queue as the queue field"),
        ({"type": "", "queue": Q}, 400, "type must be a non-empty string"),
        ({"type": "x", "queue": Q, "payload": 1, "payload_json": "1"}, 400, "give payload or payload_json"),
        ({"type": "x", "queue": Q, "options": {"task_id": "p00"}}, 409, "'p00'"),
    ]:
        r = post("/api/tasks", body)
        assert r.status_code == status and message in r.json()["error"], (body, r.status_code, r.text)
    r = web.post("/api/tasks", content=b'{"type": "x", "queue": ', headers={**_csrf(web), "content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    assert web.post("/api/tasks", json={"type": "x", "queue": Q}).status_code == 403  # no CSRF token
    with TestClient(create_app(seeded), base_url=f"http://{REBOUND}") as foreign:
        foreign.cookies.set("asynqpy_csrf", "t")
        assert foreign.post("/api/tasks", json={"type": "x", "queue": Q}, headers={"X-CSRF-Token": "t"}).status_code == 400

    # duplicate: a new id, the same type, payload and options; the form is filled with them
    r = post(f"/api/queues/{Q}/tasks/r1/duplicate")
    copy = r.json()["task"]
    assert r.status_code == 201 and copy["id"] != "r1" and copy["type"] == "report" and copy["payload"] == {"day": 1}
    assert (copy["max_retry"], copy["priority"], copy["headers"], copy["state"]) == (3, 8, {"by": "ops"}, "pending")
    form = web.get("/enqueue", params={"queue": Q, "from": "r1"}).text
    assert 'id="copy-of"' in form and 'value="report"' in form and "&#34;priority&#34;: 8" in form
    assert post(f"/api/queues/{Q}/tasks/nope/duplicate").status_code == 404

    # edit: payload (as a form's JSON text), priority and due time; bad values change nothing
    page = web.get(f"/queues/{Q}/tasks/r1").text
    assert 'id="edit"' in page and 'id="duplicate"' in page
    r = post(f"/api/queues/{Q}/tasks/r1/edit", {"payload_json": '{"day": 9}', "priority": 2, "process_in": 0})
    assert r.status_code == 200 and (r.json()["task"]["payload"], r.json()["task"]["priority"],
                                     r.json()["task"]["state"]) == ({"day": 9}, 2, "pending"), r.text
    for body, status, message in [({"payload_json": "{oops"}, 400, "payload is not valid JSON"),
                                  ({"max_retry": -1}, 400, "max_retry must be an int >= 0"),
                                  ({"colour": 1}, 400, "colour"), ({}, 400, "nothing to change")]:
        r = post(f"/api/queues/{Q}/tasks/r1/edit", body)
        assert r.status_code == status and message in r.json()["error"], (body, r.text)
    post(f"/api/queues/{Q}/actions", {"action": "archive", "ids": ["p01"]})
    r = post(f"/api/queues/{Q}/tasks/p01/edit", {"max_retry": 1})
    assert r.status_code == 409 and "edit applies to pending, scheduled and retry tasks" in r.json()["error"]
    assert 'id="edit"' not in web.get(f"/queues/{Q}/tasks/p01").text
    with Inspector(seeded) as insp:
        t = insp.task_info(Q, "r1")
        assert (t.payload, t.priority, t.max_retry) == ({"day": 9}, 2, 3)  # (the refused edits wrote nothing)
        info = insp.queue_info(Q)
        assert (info.pending, info.scheduled, info.archived) == (44 + 2, 1, 1)  # 45 - p01 + r1 + its copy
        assert insp.queue_info("fresh").pending == 1


def test_bulk_actions_on_selected_tasks_report_each_one(web: TestClient, seeded: str) -> None:
    """The queue page's checkboxes send one batch (the actions API); each id gets its result."""
    page = web.get(f"/queues/{Q}", params={"state": "pending", "size": 5}).text
    assert page.count('class="pick"') == 5 and 'id="select-all"' in page and 'data-action="archive" disabled' in page
    r = web.post(f"/api/queues/{Q}/actions", json={"action": "archive", "ids": ["p03", "p04", "xss"]},
                 headers=_csrf(web)).json()["results"]
    assert r["p03"] == r["p04"] == "ok" and r["xss"] == "ok"  # (a scheduled task may be archived too)
    r = web.post(f"/api/queues/{Q}/actions", json={"action": "run", "ids": ["p03", "p05"]}, headers=_csrf(web)).json()
    assert r["results"]["p03"] == "ok" and "already pending" in r["results"]["p05"]
    with Inspector(seeded) as insp:
        assert (insp.queue_info(Q).pending, insp.queue_info(Q).archived) == (44, 2)


def test_search_by_id_prefix_and_type_is_bounded_and_resumable(web: TestClient, seeded: str) -> None:
    with Client(seeded) as c:
        c.enqueue("sms", {"to": 1}, queue=Q, task_id="a*[b]?")  # glob characters, matched as themselves
        c.enqueue("sms", {"to": 2}, queue=Q, task_id="p99", process_in=60)
    got = web.get(f"/api/queues/{Q}/search", params={"id": "p4"}).json()
    assert got["cursor"] == 0 and sorted(t["id"] for t in got["tasks"]) == [f"p4{i}" for i in range(5)]
    got = web.get(f"/api/queues/{Q}/search", params={"type": "sms"}).json()
    assert sorted((t["id"], t["state"]) for t in got["tasks"]) == [("a*[b]?", "pending"), ("p99", "scheduled")]
    got = web.get(f"/api/queues/{Q}/search", params={"id": "p9", "type": "sms"}).json()
    assert [t["id"] for t in got["tasks"]] == ["p99"]
    assert [t["id"] for t in web.get(f"/api/queues/{Q}/search", params={"id": "a*"}).json()["tasks"]] == ["a*[b]?"]
    got = web.get(f"/api/queues/{Q}/search", params={"id": "zzz"}).json()
    assert (got["cursor"], got["tasks"], got["looked"] <= got["total"]) == (0, [], True)
    r = web.get(f"/api/queues/{Q}/search")
    assert r.status_code == 400 and "give at least one condition" in r.json()["error"]
    assert web.get("/api/queues/nope/search", params={"id": "p"}).status_code == 404
    page = web.get(f"/queues/{Q}/search", params={"type": "sms"}).text
    assert 'data-id="p99"' in page and 'data-id="p00"' not in page and "the whole queue was searched" in page
    assert 'id="find"' in web.get(f"/queues/{Q}").text
    # bounded: a big queue is searched a batch at a time, each call going on from the last one's cursor
    with Client(seeded) as c:
        c.enqueue_many([("bulk", i) for i in range(1500)], queue="big")
    seen: set[str] = set()
    cursor, calls = 0, 0
    while True:
        got = web.get("/api/queues/big/search", params={"type": "bulk", "limit": 1, "cursor": cursor,
                                                        "budget": 500}).json()
        calls += 1
        assert len(got["tasks"]) <= 700  # (a batch of HSCAN, not the queue)
        seen |= {t["id"] for t in got["tasks"]}
        cursor = got["cursor"]
        if not cursor:
            break
    assert len(seen) == 1500 and calls >= 2


def test_search_by_payload_counts_and_acts_on_every_match(web: TestClient, seeded: str) -> None:
    """docs/search.md from the console's API: conditions as query parameters (payload=path=value,
    repeatable), the count, then an action on every match; bad input is a 400, nothing changed."""
    with Client(seeded) as c:
        c.enqueue_many([("order", {"customer": {"id": i % 5}, "n": i}) for i in range(40)], queue="shop")
    got = web.get("/api/queues/shop/search", params={"payload": ["customer.id=3", "n=13"]}).json()
    assert [t["payload"]["n"] for t in got["tasks"]] == [13]
    assert web.get("/api/queues/shop/search/count", params={"payload": "customer.id=3"}).json() == {"matches": 8}
    rep = web.post("/api/queues/shop/search/archive", params={"payload": "customer.id=3"},
                   headers=_csrf(web)).json()
    assert (rep["done"], rep["gone"], rep["refused"]) == (8, 0, {}), rep
    assert web.get("/api/queues/shop/search/count", params={"state": "archived"}).json() == {"matches": 8}
    for bad in ({"state": "nosuch"}, {"payload": "a..b=1"}, {}):
        assert web.get("/api/queues/shop/search/count", params=bad).status_code == 400, bad
    r = web.post("/api/queues/shop/search/explode", params={"type": "order"},
                 headers=_csrf(web))
    assert r.status_code == 400 and web.get("/api/queues/shop/search/count", params={"type": "order"}).json() == \
        {"matches": 40}
    page = web.get("/queues/shop/search", params={"payload": "customer.id=3", "state": "archived"}).text
    assert page.count('data-id="') == 8 and 'id="search-act"' in page


def test_periodic_entries_paused_resumed_run_now_and_removed(web: TestClient, seeded: str) -> None:
    with Inspector(seeded) as insp:
        insp.cron_add("nightly", "report", {"n": 1}, cron="0 3 * * *", queue=Q)
        insp.cron_add("other/one", "ping", every=60, queue="other")
    page = web.get("/scheduler").text
    assert f'data-post="/api/queues/{Q}/scheduler/nightly/pause"' in page
    assert 'data-post="/api/queues/other/scheduler/other%2Fone/run"' in page  # one segment: "/" encoded
    post = lambda path: web.post(path, headers=_csrf(web))  # noqa: E731
    assert post(f"/api/queues/{Q}/scheduler/nightly/pause").json() == {"done": "pause"}
    assert f'data-post="/api/queues/{Q}/scheduler/nightly/resume"' in web.get("/scheduler").text
    paused = {e["entry"]["name"]: e["paused"] for e in web.get("/api/scheduler").json()}
    assert paused == {"nightly": True, "other/one": False}
    assert post(f"/api/queues/{Q}/scheduler/nightly/resume").json() == {"done": "resume"}
    task_id = post("/api/queues/other/scheduler/other%2Fone/run").json()["task_id"]  # (as the page sends it)
    assert web.get(f"/api/queues/other/tasks/{task_id}").json()["task"]["type"] == "ping"
    assert post(f"/api/queues/{Q}/scheduler/nightly/remove").json() == {"done": "remove"}
    r = post(f"/api/queues/{Q}/scheduler/nightly/pause")
    assert r.status_code == 404
    r = post("/api/queues/other/scheduler/other/one/explode")
    assert r.status_code == 400 and "action must be one of" in r.json()["error"]
    assert web.post("/api/queues/other/scheduler/other/one/remove").status_code == 403  # no CSRF token
    assert [e["entry"]["name"] for e in web.get("/api/scheduler").json()] == ["other/one"]


def test_per_day_charts_come_from_the_stored_daily_counters(web: TestClient, seeded: str) -> None:
    """The charts read the daily processed/failed counters Redis keeps (not what a page saw):
    every queue together on the overview, one queue on its page, oldest day first."""
    import re
    from datetime import timedelta

    import redis

    from asynqpy.core.model.clock import Clock
    from asynqpy.core.spine.keys import queue_keys

    today = Clock().today()
    r = redis.Redis.from_url(seeded)
    r.set(queue_keys(Q).processed_on(today - timedelta(days=2)), 40)
    r.set(queue_keys(Q).failed_on(today - timedelta(days=2)), 3)
    r.set(queue_keys("other").processed_on(today - timedelta(days=2)), 2)
    r.set(queue_keys("other").processed_on(today), 7)
    got = web.get("/api/history", params={"days": 3}).json()
    assert got["days"] == [{"date": (today - timedelta(days=2)).isoformat(), "processed": 42, "failed": 3},
                           {"date": (today - timedelta(days=1)).isoformat(), "processed": 0, "failed": 0},
                           {"date": today.isoformat(), "processed": 7, "failed": 0}]
    assert got["queues"]["other"][-1] == {"date": today.isoformat(), "processed": 7, "failed": 0}
    day = (today - timedelta(days=2)).isoformat()
    overview = web.get("/").text
    assert f'<g class="day" data-date="{day}" data-processed="42" data-failed="3">' in overview
    assert re.search(r'<b id="day-processed">49</b>', overview) and "<svg" in overview and "<script>" not in overview
    queue_page = web.get(f"/queues/{Q}").text
    assert f'data-date="{day}" data-processed="40" data-failed="3"' in queue_page
    assert web.get("/api/history", params={"days": 91}).status_code == 400


def test_the_redis_page_shows_version_memory_clients_and_the_slowlog(web: TestClient, seeded: str) -> None:
    import redis

    r = redis.Redis.from_url(seeded)
    before = r.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    r.slowlog_reset()
    r.config_set("slowlog-log-slower-than", 0)  # every command is logged
    try:
        r.execute_command("ECHO", "find-me-in-the-slowlog")
        api = web.get("/api/redis").json()
    finally:
        r.config_set("slowlog-log-slower-than", before)
    assert api["redis_version"] and api["connected_clients"] >= 1 and api["used_memory"] > 0
    assert 1 <= len(api["slowlog"]) <= 10
    assert api["slowlog"] == sorted(api["slowlog"], key=lambda e: -e["duration_us"])
    page = web.get("/redis").text
    assert api["redis_version"] in page and 'id="slowlog"' in page and "connected" in page


def test_tenants_api_and_page(web: TestClient, seeded: str) -> None:
    """The queue's tenants (docs/tenants.md): listed, paged, and changed one at a time; bad actions
    and values are refused (400, nothing changed)."""
    with Client(seeded) as c:
        for t in ("acme", "globex", "initech"):
            c.enqueue_many([("t", i) for i in range(3)], queue=Q, tenant=t)
    got = web.get(f"/api/queues/{Q}/tenants?count=2").json()
    assert [t["tenant"] for t in got["tenants"]] == ["acme", "globex"] and got["next"] == "globex"
    assert [t["tenant"] for t in web.get(f"/api/queues/{Q}/tenants?after=globex").json()["tenants"]] == ["initech"]
    base = f"/api/queues/{Q}/tenants/acme"
    assert web.post(f"{base}/pause", headers=_csrf(web)).json()["tenant"]["paused"] is True
    assert web.post(f"{base}/weight?value=3", headers=_csrf(web)).json()["tenant"]["weight"] == 3
    assert web.post(f"{base}/rate?value=50/s", headers=_csrf(web)).json()["tenant"]["rate"] == 50.0
    assert web.post(f"{base}/concurrency?value=2", headers=_csrf(web)).json()["tenant"]["concurrency"] == 2
    for bad in ("weight?value=lots", "rate?value=fast", "weight?value=0", "explode"):
        r = web.post(f"{base}/{bad}", headers=_csrf(web))
        assert r.status_code == 400 and "error" in r.json(), bad
    states = {t["tenant"]: t["state"] for t in web.get(f"/api/queues/{Q}/tenants").json()["tenants"]}
    assert states == {"acme": "paused", "globex": "taking turns", "initech": "taking turns"}  # (the CLI's words)
    page = web.get(f"/queues/{Q}/tenants").text
    assert 'data-id="acme"' in page and "paused" in page and "50/s" in page and 'data-param="value"' in page
    assert page.count("taking turns") == 2
    assert 'id="tenants-link"' in web.get(f"/queues/{Q}").text
    assert web.post(f"{base}/clear", headers=_csrf(web)).json()["tenant"]["weight"] == 1
    with Inspector(seeded) as insp:
        assert {t.tenant: t.pending for t in insp.tenants(Q)} == {"acme": 3, "globex": 3, "initech": 3}


def test_names_in_urls_are_one_encoded_segment_and_dot_names_are_refused(web: TestClient, seeded: str) -> None:
    """Issue 42 #16: every name a page puts in a URL's path is one segment with '/' encoded (a
    browser resolves '..' segments before sending: a tenant named '../../billing' turned "pause"
    into "pause queue billing"); '.' and '..', which no encoding keeps, are refused as tenant and
    periodic entry names where they are made (a typed error; nothing queued is lost)."""
    evil = "../../billing"
    with Client(seeded) as c:
        c.enqueue("report", 1, queue="shared", tenant=evil)
        c.enqueue("report", 2, queue="shared", tenant="a/b", task_id="x/../y")
        for name in (".", ".."):
            with pytest.raises(InvalidArgumentError, match="path segments"):
                c.enqueue("report", 3, queue="shared", tenant=name)
    page = web.get("/queues/shared/tenants").text
    assert 'data-post="/api/queues/shared/tenants/..%2F..%2Fbilling/pause"' in page
    assert 'data-post="/api/queues/shared/tenants/a%2Fb/pause"' in page
    assert 'href="/queues/shared/tasks/x%2F..%2Fy"' in web.get("/queues/shared").text
    r = web.post("/api/queues/shared/tenants/..%2F..%2Fbilling/pause", headers=_csrf(web))
    assert r.status_code == 200 and r.json()["tenant"]["paused"] is True, r.text
    r = web.post("/api/tasks", json={"type": "x", "queue": "shared", "options": {"tenant": ".."}}, headers=_csrf(web))
    assert r.status_code == 400 and "path segments" in r.json()["error"]
    with Inspector(seeded) as insp:
        with pytest.raises(InvalidArgumentError, match="path segments"):
            insp.cron_add("..", "report", None, cron="0 3 * * *", queue="shared")
        assert insp.queue_info("shared").pending == 2 and insp.queue_info(Q).pending == 45
        assert {t.tenant: t.paused for t in insp.tenants("shared")} == {evil: True, "a/b": False}


def test_the_served_console_closes_idle_connections_and_caps_them(redis_url: str, monkeypatch: Any) -> None:
    """Issue 42 #14, the console's side: as ``asynqpy web`` serves it (asynqpy/web/serving.py), a
    connection that never completes its request's headers is closed after REQUEST_TIMEOUT, at most
    MAX_CONNECTIONS are open (one more closes the oldest idle one), and /livez answers meanwhile."""
    import socket
    import threading
    import time
    import urllib.request

    import uvicorn
    from redisproc import free_port

    from asynqpy.web import serving

    monkeypatch.setattr(serving, "REQUEST_TIMEOUT", 1.0)
    monkeypatch.setattr(serving, "MAX_CONNECTIONS", 16)
    port = free_port()
    server = uvicorn.Server(serving.config(create_app(redis_url), "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "the console did not start"
        time.sleep(0.02)
    conns = []
    try:
        for i in range(80):
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            c.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n" if i % 2 else b"")  # never the end of the headers
            conns.append(c)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5) as r:
            assert r.status == 200
        assert len(server.server_state.connections) <= 16 + 1

        def closed(c: socket.socket) -> bool:
            c.settimeout(0.01)
            try:
                return c.recv(1) == b""
            except TimeoutError:
                return False
            except OSError:
                return True

        deadline = time.monotonic() + 10
        while not all(closed(c) for c in conns):
            assert time.monotonic() < deadline, "idle connections are still open"
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            assert r.status == 200
    finally:
        for c in conns:
            c.close()
        server.should_exit = True
        thread.join(10)


def test_scripted_clients_csrf_with_no_auth_basic_and_bearer(seeded: str) -> None:
    """Issue 42 #25 (docs/web.md "Scripted clients"): without auth, or with basic auth (which a
    browser remembers and sends by itself), an action needs X-CSRF-Token equal to the asynqpy_csrf
    cookie, whose value a script may choose itself (no page fetched first); with bearer auth the
    token is enough (a browser never sends it by itself). A foreign Origin is refused either way."""
    import httpx

    both = {"Cookie": "asynqpy_csrf=chosen-by-script", "X-CSRF-Token": "chosen-by-script"}
    for auth, creds in ((None, {}), ("basic:ops:s3cret", {"Authorization": "Basic " + base64.b64encode(
            b"ops:s3cret").decode()})):
        app = create_app(seeded, auth=Auth.parse(auth) if auth else None)
        with TestClient(app, base_url="http://localhost", cookies=httpx.Cookies()) as tc:
            r = tc.post(f"/api/queues/{Q}/pause", headers=creds)
            assert r.status_code == 403 and "X-CSRF-Token" in r.json()["error"], (auth, r.text)
            tc.cookies.clear()
            r = tc.post(f"/api/queues/{Q}/pause", headers={**creds, **both})
            assert r.status_code == 200, (auth, r.text)
            tc.cookies.clear()
            assert tc.post(f"/api/queues/{Q}/resume", headers={**creds, **both}).status_code == 200
    with TestClient(create_app(seeded, auth=Auth.parse("bearer:tok-123")), base_url="http://localhost") as tc:
        bearer = {"Authorization": "Bearer tok-123"}
        assert tc.post(f"/api/queues/{Q}/pause", headers={"Authorization": "Bearer nope"}).status_code == 401
        r = tc.post(f"/api/queues/{Q}/pause", headers=bearer)  # no cookie, no CSRF header: the token is enough
        assert r.status_code == 200 and r.json() == {"changed": True}, r.text
        r = tc.post(f"/api/queues/{Q}/resume", headers={**bearer, "Origin": "http://evil.example"})
        assert r.status_code == 403 and "cross-origin" in r.json()["error"]
    with TestClient(create_app(seeded, read_only=True, auth=Auth.parse("bearer:tok-123")),
                    base_url="http://localhost") as tc:
        assert tc.post(f"/api/queues/{Q}/resume", headers={"Authorization": "Bearer tok-123"}).status_code == 403


def test_the_console_is_assembled_from_one_router_per_resource() -> None:
    """Issue 44 #4: ``create_app`` only assembles (no function of its own inside it); every route
    of the application comes from a resource's router in asynqpy/web/routes/, none of which is
    over 200 lines."""
    import ast
    from pathlib import Path

    from fastapi.routing import APIRoute

    from asynqpy.web import app as app_module
    from asynqpy.web import routes

    sizes = {p.name: len(p.read_text().splitlines()) for p in Path(routes.__file__).parent.glob("*.py")}
    assert len(sizes) >= 8 and max(sizes.values()) <= 200, sizes
    tree = ast.parse(Path(app_module.__file__).read_text())
    create = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "create_app")
    assert [n for n in ast.walk(create) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            and n is not create] == []
    def served(found: list[Any]) -> Iterator[Any]:
        for r in found:  # (a newer FastAPI keeps an included router whole, as its original_router)
            inner = getattr(r, "original_router", None)
            yield from served(inner.routes) if inner is not None else [r]

    app = create_app("memory://console-assembly")
    modules = {r.endpoint.__module__ for r in served(app.routes) if isinstance(r, APIRoute)}
    assert {m.rpartition(".")[0] for m in modules} == {"asynqpy.web.routes"} and len(modules) >= 8, modules
    for resource in ("queues", "tasks", "processes", "tenants", "servers", "cron", "probes"):
        assert f"asynqpy.web.routes.{resource}" in modules, resource
