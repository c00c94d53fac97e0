"""Encryption as operators meet it (issue 48 #1, #2; docs/encryption.md): verify before decrypting,
``asynqpy keys rotate`` killed mid-way and started again, a worker and the CLI taking their keys
from the environment, ``tenant forget``'s audit event from the CLI, ``task search`` with keys, and
the web console showing "encrypted" without keys and the plaintext with them (in Chromium)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import Client, Inspector, KeyRing, ServeMux, Task
from asynqpy.core.model.codec import decode
from asynqpy.core.security import encryption as enc
from asynqpy.core.security.rotation import CURSOR
from asynqpy.core.spine.keys import queue_keys

ROOT = Path(__file__).resolve().parent.parent
K1, K2, OTHER = b"1" * 32, b"2" * 32, b"x" * 32
K = queue_keys("default")
SECRET = "card-4111-1111-1111-1111"


def _kid(value: bytes) -> str:
    """The key id of a stored task's payload (state char and lease token removed)."""
    body = value[9:] if value[:1] == b"a" else value[1:]
    return enc.key_id(decode(body).payload)


def _cli(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    res = CliRunner(env=env).invoke(main, list(args), input=input)
    return res.exit_code, res.stdout, res.stderr


def test_a_signature_is_verified_before_anything_is_decrypted(backend: Any) -> None:
    """A message that fails its signature is archived for that reason, even when it would not
    decrypt either: the worker never opens what it has not verified (encrypt, then sign)."""
    ring, key = KeyRing({"k1": K1}), b"s" * 32
    forged_unknown = Client(backend.sync, encryption=KeyRing({"k9": K1}), signing_key=b"f" * 32).enqueue("t", SECRET).id
    forged_wrong = Client(backend.sync, encryption=KeyRing({"k1": OTHER}), signing_key=b"f" * 32).enqueue("t", SECRET).id
    unsigned = Client(backend.sync, encryption=ring).enqueue("t", SECRET).id
    good = Client(backend.sync, encryption=ring, signing_key=key).enqueue("t", SECRET).id
    opened: list[str] = []
    real_open = KeyRing.open_bytes

    def spy(self: KeyRing, ext: Any, *args: Any, **kwargs: Any) -> bytes:
        opened.append(enc.key_id(ext))
        return real_open(self, ext, *args, **kwargs)

    ran: list[Any] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append((task.id, task.payload))

    async def main() -> None:
        async with serving(backend.new_async(), mux, encryption=ring, signing_key=key):
            await until(lambda: backend.sync.zcard(K.archived) == 3 and ran)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(KeyRing, "open_bytes", spy)
        asyncio.run(main())
    assert ran == [(good, SECRET)]
    assert opened == ["k1"]  # only the verified task's payload was opened
    insp = Inspector(backend.sync, encryption=ring, signing_key=key)
    for id in (forged_unknown, forged_wrong, unsigned):
        info = insp.task_info("default", id)
        assert info.last_error.startswith("bad signature") and info.retried == 0, (id, info.last_error)


@pytest.mark.real
@pytest.mark.slow
def test_keys_rotate_killed_mid_way_goes_on_from_where_it_stopped(redis_url: str, tmp_path: Path) -> None:
    """``asynqpy keys rotate`` killed (SIGKILL, between two pages: nothing of the process runs
    after it) leaves its place in Redis; started again, it re-encrypts exactly what is left."""
    import redis

    n = 1000
    with Client(redis_url, encryption=KeyRing({"k1": K1})) as c:
        c.enqueue_many([("t", {"i": i, "s": SECRET}) for i in range(n)], queue="default", process_in=3600)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"k1": K1.hex(), "k2": K2.hex()}))
    # the third page kills its own process (a real SIGKILL: no finally, no cleanup runs)
    child = (
        "import os, signal, sys\n"
        "from asynqpy.core.security import rotation\n"
        "real, seen = rotation._page, [0]\n"
        "def page(*a):\n"
        "    seen[0] += 1\n"
        "    if seen[0] == 3:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(*a)\n"
        "rotation._page = page\n"
        "from asynqpy.cli.main import main\n"
        "main(sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-c", child, "keys", "rotate", "--encryption-keys", str(keys),
                           "--redis-url", redis_url], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, (proc.returncode, proc.stderr)
    r = redis.Redis.from_url(redis_url)
    place = r.hgetall(CURSOR)
    assert place[b"queue"] == b"default" and place[b"cursor"] != b"0"
    kids = [_kid(v) for v in r.hvals(K.tasks)]
    first = kids.count("k2")
    assert 0 < first < n and kids.count("k1") == n - first
    code, out, err = _cli("keys", "rotate", "--encryption-keys", str(keys), "--redis-url", redis_url)
    assert code == 0 and f"{n - first} task(s) re-encrypted" in out and "done" in out, (out, err)
    assert [_kid(v) for v in r.hvals(K.tasks)] == ["k2"] * n and not r.exists(CURSOR)
    code, out, _ = _cli("keys", "rotate", "--encryption-keys", str(keys), "--redis-url", redis_url)
    assert code == 0 and "0 task(s) re-encrypted" in out
    with Inspector(redis_url, encryption=KeyRing({"k2": K2})) as insp:  # k1 no longer needed
        assert insp.search_count("default", payload={"s": SECRET}) == n


@pytest.mark.real
@pytest.mark.slow
def test_a_worker_takes_its_keys_from_the_environment(redis_url: str, tmp_path: Path) -> None:
    """``asynqpy worker`` reads $ASYNQPY_ENCRYPTION_KEYS (a JSON object here; a file's path also
    works): it opens the tasks, and what it writes back is sealed. A worker given a bad value
    there does not start: one line, exit 2."""
    import redis

    ring = KeyRing({"k1": K1})
    with Client(redis_url, encryption=ring) as c:
        ids = [c.enqueue("noop", {"s": SECRET}, queue="envq", retention=600).id for _ in range(3)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "ASYNQPY_TEST_URL": redis_url,
           enc.ENV: json.dumps({"k1": K1.hex()})}
    worker = subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "worker", "workers:mux", "-q", "envq",
                               "--redis-url", redis_url], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True)
    try:
        r = redis.Redis.from_url(redis_url)
        deadline = time.monotonic() + 60
        while r.zcard(queue_keys("envq").completed) < 3:
            assert worker.poll() is None and time.monotonic() < deadline, "the worker did not complete the tasks"
            assert r.zcard(queue_keys("envq").archived) == 0, "archived: the worker could not open them"
            time.sleep(0.05)
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    assert b"no key ring" not in err
    with Inspector(redis_url, encryption=ring) as insp:
        assert [insp.task_info("envq", id).payload for id in ids] == [{"s": SECRET}] * 3
    bad = subprocess.run([sys.executable, "-m", "asynqpy.cli.main", "worker", "workers:mux", "-q", "envq",
                          "--redis-url", redis_url], cwd=ROOT, env={**env, enc.ENV: str(tmp_path / "missing.json")},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "cannot read encryption key file" in bad.stderr


@pytest.mark.real
def test_cli_tenant_forget_writes_the_audit_event(redis_url: str, tmp_path: Path) -> None:
    ring = KeyRing({"k1": K1}, tenant_keys=True)
    with Client(redis_url, encryption=ring) as c:
        c.enqueue("t", SECRET, tenant="acme", process_in=3600)
        kept = c.enqueue("t", SECRET, tenant="globex", process_in=3600).id
    before = time.time()
    code, out, err = _cli("tenant", "forget", "default", "acme", "--yes", "--json", "--redis-url", redis_url,
                          env={enc.ENV: json.dumps({"k1": K1.hex()})})
    assert code == 0, err
    with Inspector(redis_url, encryption=ring) as insp:
        audit = [e for e in insp.events("default") if e.event == "tenant_forgotten"]
        assert [(e.tenant, e.queue) for e in audit] == [("acme", "default")]
        assert audit[0].time.timestamp() >= before - 1
        assert insp.task_info("default", kept).payload == SECRET
    code, out, err = _cli("events", "-q", "default", "--json", "--redis-url", redis_url)
    assert code == 0 and "tenant_forgotten" in out, (out, err)


@pytest.mark.real
def test_cli_task_search_with_keys(redis_url: str, tmp_path: Path) -> None:
    """``task search --encryption-keys`` matches encrypted payloads (decrypted in the reader);
    without keys a payload condition meets none of them."""
    with Client(redis_url, encryption=KeyRing({"k1": K1})) as c:
        for i in range(12):
            c.enqueue("t", {"user": i % 4, "s": SECRET}, task_id=f"s{i:02d}")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"k1": K1.hex()}))
    base = ("task", "search", "-q", "default", "-p", "user=3", "--redis-url", redis_url)
    code, out, err = _cli(*base, "--json", "--encryption-keys", str(keys))
    assert code == 0, err
    assert sorted(t["id"] for t in json.loads(out)) == ["s03", "s07", "s11"]
    assert all(t["payload"] == {"user": 3, "s": SECRET} for t in json.loads(out))
    code, out, err = _cli(*base, "--dry-run")
    assert code == 0 and "0 task(s) match" in out, (out, err)
    code, out, err = _cli(*base, "--then", "archive", "--yes", "--encryption-keys", str(keys))
    assert code == 0 and "archive: 3 done" in out, (out, err)
    code, out, err = _cli("task", "search", "-q", "default", "-p", "user", "--encryption-keys", str(tmp_path / "no"),
                          "--redis-url", redis_url)
    assert code == 2 and err.count("\n") == 1 and "cannot read encryption key file" in err


@pytest.mark.real
@pytest.mark.slow
def test_the_console_says_encrypted_without_keys_and_decrypts_with_them(redis_url: str) -> None:
    """In Chromium: a console without the key ring shows "encrypted" (and the key id) for an
    encrypted payload, result and logs, and no byte of their plaintext; one given the ring shows
    them decrypted, finds the task by its encrypted payload and acts on the match after the
    question with the count."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    from test_web_browser import Console, _alert_text, _chromium, _ids, _read, click, wait_for

    ring = KeyRing({"k1": K1})
    with Client(redis_url, encryption=ring) as c:
        c.enqueue("t", {"card": SECRET, "user": 7}, queue="vault", task_id="v1", process_in=3600)
        c.enqueue("t", {"card": "4000-0000", "user": 8}, queue="vault", task_id="v2", process_in=3600)
        c.enqueue("t", {"card": SECRET, "user": 9}, queue="vault", task_id="done1", retention=3600)
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> dict[str, Any]:
        task.log(f"charged {task.payload['card']}")
        return {"charged": task.payload["card"]}

    async def run_one() -> None:
        import redis.asyncio as aredis

        async with serving(aredis.Redis.from_url(redis_url), mux, encryption=ring, queues=["vault"]):
            with Inspector(redis_url) as insp:
                await until(lambda: insp.queue_info("vault").completed == 1)

    asyncio.run(run_one())
    plain, keyed = Console(redis_url), Console(redis_url, encryption=ring)
    browser_gen = _chromium()
    browser = next(browser_gen)
    try:
        for page in ("/queues/vault/tasks/v1", "/queues/vault/tasks/done1", "/queues/vault?state=scheduled",
                     "/queues/vault?state=completed", "/queues/vault/search?payload=user%3D7"):
            browser.get(plain.url + page)
            wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "main, body"))
            assert SECRET not in browser.page_source, page
        browser.get(plain.url + "/queues/vault/tasks/v1")
        assert "encrypted" in _read(browser, "#payload") and "k1" in _read(browser, "#payload")
        browser.get(plain.url + "/queues/vault/tasks/done1")
        assert "encrypted" in _read(browser, "#result") and "encrypted" in _read(browser, "#logs")
        browser.get(plain.url + "/queues/vault/search?payload=user%3D7")
        assert [i for i in _ids(browser, "#found tbody tr") if i] == []  # a ciphertext holds nothing to match

        browser.get(keyed.url + "/queues/vault/tasks/v1")
        assert SECRET in _read(browser, "#payload") and "encrypted" not in _read(browser, "#payload")
        browser.get(keyed.url + "/queues/vault/tasks/done1")
        assert SECRET in _read(browser, "#result") and f"charged {SECRET}" in _read(browser, "#logs")
        browser.get(keyed.url + "/queues/vault?state=scheduled")
        browser.find_element(By.ID, "find-payload").send_keys("user=7")
        browser.find_element(By.CSS_SELECTOR, "#find button").click()
        wait_for(lambda: _ids(browser, "#found tbody tr") == ["v1"])
        Select(browser.find_element(By.ID, "search-action")).select_by_visible_text("archive")
        click(browser, "#search-act")
        wait_for(lambda: _alert_text(browser) == "archive 1 matching task(s) in queue vault?")
        browser.switch_to.alert.accept()
        wait_for(lambda: browser.find_element(By.ID, "message").text.startswith("archive: 1 done"))
        with Inspector(redis_url) as insp:
            assert insp.task_info("vault", "v1").state.value == "archived"
            assert insp.task_info("vault", "v2").state.value == "scheduled"
    finally:
        browser_gen.close()
        plain.stop()
        keyed.stop()


def test_an_app_hands_its_ring_to_its_clients_and_servers(backend: Any) -> None:
    """``App(..., encryption=ring)``: its task functions enqueue sealed payloads, its server opens
    them and seals the results, and ``App.client`` reads them back decrypted."""
    from asynqpy import App

    app = App(backend.sync, encryption=KeyRing({"k1": K1}))

    @app.task(queue="appq")
    async def charge(card: str) -> str:
        return card[-4:]

    info = charge.using(retention=600).enqueue(SECRET)
    value = backend.sync.hget(queue_keys("appq").tasks, info.id)
    assert SECRET.encode() not in value and _kid(value) == "k1"

    from asynqpy.testing import drain

    assert drain(app, backend.new_async()).processed == 1  # (the App's ring: drain gives it to its server)
    stored = backend.sync.hget(queue_keys("appq").tasks, info.id)
    assert enc.key_id(decode(stored[1:]).result) == "k1"  # the result sealed by the App's server
    assert app.client().result(info.id, queue="appq", timeout=5) == SECRET[-4:]
    app.close()
