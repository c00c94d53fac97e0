"""``asynqpy upgrade`` (core/spine/migrations.py, redisio/upgrade.py, cli/upgrade.py): the store's
version and the migrations between versions. This release has no migration (every store is
protocol 1), so the mechanism is tested with a test-only one, protocol 1 -> 2 (:data:`TEST_STEP`:
every task of every queue gets an entry in its queue's ``v2`` hash, one HSETNX each): on fakeredis,
redis-server and the Cluster; killed midway (SIGKILL of a subprocess) and run again, which leaves
what one clean run leaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asynqpy import Client, ProtocolVersionError
from asynqpy.cli.main import main as cli
from asynqpy.core.server import record as server_record
from asynqpy.core.spine.calls import Call
from asynqpy.core.spine.keys import PROTOCOL, SERVERS, UPGRADE, QueueKeys, server_info
from asynqpy.core.spine.migrations import REGISTRY, Migration, MigrationError, Registry, task_batches
from asynqpy.redisio.upgrade import run_upgrade

ROOT = Path(__file__).resolve().parent.parent


def _mark(q: QueueKeys, task_id: str, stored: bytes) -> Call[Any]:
    """The test step's change of one task: its state letter and stored size, once (HSETNX)."""
    return Call(lambda reply: reply, command=("HSETNX", q.base + "v2", task_id, f"{stored[:1].decode()}{len(stored)}"))


TEST_STEP = Migration("test-index", 1, 2, "index every task in its queue's v2 hash (test only)", task_batches(_mark))
TEST = Registry(TEST_STEP)


def _sync(backend: Any) -> Any:
    return backend.sync


def _url(backend: Any) -> Any:
    return backend.sync if backend.kind == "fake" else backend.url


def _fill(target: Any, queues: int, per_queue: int) -> dict[str, set[str]]:
    ids: dict[str, set[str]] = {}
    with Client(target) as c:
        for n in range(queues):
            q = f"up{n}"
            ids[q] = {c.enqueue("t", i, queue=q, process_in=3600 if i % 3 == 0 else None).id for i in range(per_queue)}
    return ids


def test_this_release_has_no_migration_and_stamps_an_unstamped_store(backend: Any) -> None:
    r = _sync(backend)
    assert list(REGISTRY) == []
    report = run_upgrade(_url(backend), dry_run=True)
    assert (report.found, report.stamped, report.steps, r.get(PROTOCOL)) == (1, False, [], None)
    report = run_upgrade(_url(backend))
    assert (report.found, report.now, report.steps, r.get(PROTOCOL)) == (1, 1, [], b"1")
    r.set(PROTOCOL, "7")
    with pytest.raises(ProtocolVersionError, match="protocol 7, newer"):
        run_upgrade(_url(backend))
    assert r.get(PROTOCOL) == b"7"
    r.delete(PROTOCOL)


def test_a_migration_changes_every_task_once_then_stamps(backend: Any) -> None:
    r = _sync(backend)
    ids = _fill(_url(backend), 3, 25)
    seen: list[int] = []
    dry = run_upgrade(_url(backend), registry=TEST, target=2, count=7, dry_run=True,
                      on_batch=lambda s: seen.append(s.seen))
    assert dry.steps[0].changed == 75 and dry.steps[0].done and seen[-1] >= 75
    assert r.get(PROTOCOL) in (None, b"1") and not r.exists(UPGRADE)
    assert all(not r.exists(f"asynqpy:{{{q}}}:v2") for q in ids)
    report = run_upgrade(_url(backend), registry=TEST, target=2, count=7)
    assert report.now == 2 and r.get(PROTOCOL) == b"2" and not r.exists(UPGRADE)
    assert report.steps[0].changed == 75 and report.steps[0].batches >= 3
    for q, want in ids.items():
        got = {k.decode(): v.decode() for k, v in r.hgetall(f"asynqpy:{{{q}}}:v2").items()}
        assert set(got) == want and all(v[0] in "ps" for v in got.values()), got
    again = run_upgrade(_url(backend), registry=TEST, target=2)
    assert again.steps == [] and again.now == 2
    with pytest.raises(ProtocolVersionError):  # this release (protocol 1) refuses the migrated store
        with Client(_url(backend)) as c:
            c.enqueue("t", 1, queue="up0")
    r.delete(PROTOCOL)


def test_a_missing_step_and_a_live_older_server_are_refused(backend: Any) -> None:
    r = _sync(backend)
    with pytest.raises(MigrationError, match="no migration from protocol 2 to 3"):
        run_upgrade(_url(backend), registry=TEST, target=3)
    assert r.get(PROTOCOL) is None and not r.exists(UPGRADE)
    _fill(_url(backend), 1, 2)
    record = server_record.pack("h:1:w", "h", 1, {"up0": 1}, 4, False, 1.7e9, [], "w")
    r.set(server_info("h:1:w"), record, px=60_000)
    r.zadd(SERVERS, {"h:1:w": int(time.time() * 1000) + 60_000})
    with pytest.raises(MigrationError, match=r"1 live server\(s\) speak a protocol older than 2.*h:1:w"):
        run_upgrade(_url(backend), registry=TEST, target=2)
    assert r.get(PROTOCOL) == b"1" and not r.exists("asynqpy:{up0}:v2")
    dry = run_upgrade(_url(backend), registry=TEST, target=2, dry_run=True)
    assert dry.old_servers and dry.steps[0].changed == 2
    assert run_upgrade(_url(backend), registry=TEST, target=2, force=True).now == 2
    r.delete(PROTOCOL)


def test_the_command(backend: Any) -> None:
    if backend.kind == "fake":
        pytest.skip("the command takes a URL")
    r = _sync(backend)
    res = CliRunner().invoke(cli, ["upgrade", "--dry-run", "--redis-url", backend.url])
    assert res.exit_code == 0 and "nothing to migrate" in res.stdout and r.get(PROTOCOL) is None, res.output
    res = CliRunner().invoke(cli, ["upgrade", "--json", "--redis-url", backend.url])
    assert res.exit_code == 0 and json.loads(res.stdout)["now"] == 1 and r.get(PROTOCOL) == b"1", res.output
    r.set(PROTOCOL, "9")
    res = CliRunner().invoke(cli, ["upgrade", "--redis-url", backend.url])
    assert res.exit_code == 2 and "protocol 9, newer" in res.stderr and r.get(PROTOCOL) == b"9", res.output
    r.delete(PROTOCOL)


KILLED = textwrap.dedent('''
    import sys, time
    sys.path.insert(0, sys.argv[3])
    from test_upgrade import TEST, TEST_STEP
    from asynqpy.core.spine.migrations import Migration, Registry
    from asynqpy.redisio.upgrade import run_upgrade

    slow = sys.argv[2] == "slow"
    def batch(cursor, count, dry_run):
        if slow:
            time.sleep(0.05)  # slow enough to be killed midway
        return (yield from TEST_STEP.batch(cursor, count, dry_run))

    registry = Registry(Migration(TEST_STEP.name, 1, 2, TEST_STEP.summary, batch)) if slow else TEST
    report = run_upgrade(sys.argv[1], registry=registry, target=2, count=10)
    print(repr(report.steps[0].resumed_from))
''')


def _state(r: Any) -> dict[bytes, Any]:
    """Every key and what it holds (not its DUMP: a set's is in no set order)."""
    read = {b"string": r.get, b"hash": r.hgetall, b"set": r.smembers, b"list": lambda k: r.lrange(k, 0, -1),
            b"zset": lambda k: r.zrange(k, 0, -1, withscores=True), b"stream": r.xrange}
    return {k: read[r.type(k)](k) for k in sorted(r.keys("*"))}


@pytest.mark.real
@pytest.mark.slow
def test_killed_midway_and_run_again_it_leaves_what_one_clean_run_leaves(redis_url: str, tmp_path: Path) -> None:
    import redis

    killed, clean = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/1")
    _fill(redis_url, 4, 150)
    for key in killed.keys("*"):  # the same store in db 1
        clean.restore(key, killed.pttl(key) if killed.pttl(key) > 0 else 0, killed.dump(key))
    assert _state(killed) == _state(clean)
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), redis_url, "slow", str(ROOT / "tests")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while int(killed.hget(UPGRADE, "seen") or 0) < 200 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, (out, err)
    cursor = killed.hget(UPGRADE, "cursor")
    assert cursor and killed.get(PROTOCOL) in (None, b"1"), "killed after it finished: nothing was tested"
    assert 0 < sum(killed.hlen(f"asynqpy:{{up{n}}}:v2") for n in range(4)) < 600
    again = subprocess.run([sys.executable, str(script), redis_url, "fast", str(ROOT / "tests")], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() != "''", "the rerun started from the beginning, not from the stored cursor"
    once = subprocess.run([sys.executable, str(script), redis_url.rsplit("/", 1)[0] + "/1", "fast",
                           str(ROOT / "tests")], env=env, capture_output=True, text=True, timeout=60)
    assert once.returncode == 0 and once.stdout.strip() == "''", once.stderr
    assert killed.get(PROTOCOL) == b"2" and not killed.exists(UPGRADE)
    assert _state(killed) == _state(clean)
    assert sum(killed.hlen(f"asynqpy:{{up{n}}}:v2") for n in range(4)) == 600


@pytest.mark.real
def test_a_migration_beside_a_running_worker_and_producer(redis_url: str) -> None:
    """A step's changes are atomic against the workers' scripts: a worker runs every task, and a
    producer goes on enqueueing, while a migration goes over the tasks (forced past the worker,
    which speaks the older protocol: what a live server of it makes a run do without --force)."""
    import asyncio
    import threading

    import redis

    from asynqpy import ServeMux, Server

    r = redis.Redis.from_url(redis_url)
    _fill(redis_url, 2, 200)  # 1 in 3 scheduled in an hour: left alone
    done: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def handle(task: Any) -> None:
        done.append(task.id)

    server = Server(redis_url, queues={"up0": 1, "up1": 1}, concurrency=8, shutdown_timeout=2)
    thread = threading.Thread(target=lambda: asyncio.run(server.arun(mux)))
    thread.start()
    now = 2 * sum(1 for i in range(200) if i % 3) + 200  # the tasks due now: _fill's and these
    try:
        while not r.zcard(SERVERS):  # (registered: its heartbeat's record is there)
            time.sleep(0.05)
        with Client(redis_url) as c:
            more = [c.enqueue("t", i, queue="up0").id for i in range(100)]
            with pytest.raises(MigrationError, match="live server"):
                run_upgrade(redis_url, registry=TEST, target=2, count=10)
            report = run_upgrade(redis_url, registry=TEST, target=2, count=10, force=True)
            more += [c.enqueue("t", i, queue="up1").id for i in range(100)]
        deadline = time.monotonic() + 60
        while len(done) < now and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.stop()
        thread.join(30)
    assert report.now == 2 and r.get(PROTOCOL) == b"2" and not r.exists(UPGRADE)
    assert len(done) == len(set(done)) == now, len(done)
    assert set(more) <= set(done) and report.steps[0].seen >= 134
    r.delete(PROTOCOL)


@pytest.mark.real
def test_the_inspector_role_of_the_minimal_acl_runs_it(redis_url: str) -> None:
    """docs/security.md: ``asynqpy upgrade`` runs as the inspector role (with the commands its
    migration's steps add: HSETNX for the test step)."""
    import redis
    from test_redis_security import documented_acl

    admin = redis.Redis.from_url(redis_url)
    rules = [">upgrade-pw" if r.startswith(">") else r for r in documented_acl()["inspector"]]
    admin.execute_command("ACL", "SETUSER", "asynqpy-upgrader", *rules, "+hsetnx")
    try:
        _fill(redis_url, 2, 5)
        admin.execute_command("ACL", "LOG", "RESET")
        url = redis_url.replace("redis://", "redis://asynqpy-upgrader:upgrade-pw@", 1)
        assert run_upgrade(url, registry=TEST, target=2, dry_run=True).steps[0].changed == 10
        assert run_upgrade(url, registry=TEST, target=2, count=3).now == 2
        assert admin.execute_command("ACL", "LOG") == []
        assert admin.hlen("asynqpy:{up0}:v2") == admin.hlen("asynqpy:{up1}:v2") == 5
    finally:
        admin.execute_command("ACL", "DELUSER", "asynqpy-upgrader")
        admin.delete(PROTOCOL)


def test_a_cursor_left_after_the_last_stamp_is_removed(backend: Any) -> None:
    """A run killed between its stamp and the cursor's removal: the next one finds the store
    migrated, and removes the cursor."""
    r = _sync(backend)
    r.set(PROTOCOL, "2")
    r.hset(UPGRADE, mapping={"step": "test-index", "cursor": "up0 0", "seen": 3, "changed": 3})
    report = run_upgrade(_url(backend), registry=TEST, target=2)
    assert (report.steps, report.stale_cursor, r.exists(UPGRADE), r.get(PROTOCOL)) == ([], "test-index", 0, b"2")
    r.delete(PROTOCOL)


@pytest.mark.real
def test_the_command_with_a_step(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``asynqpy upgrade`` says of a step (the test step in place of this release's none):
    dry, refused by a live server of the older protocol, forced."""
    import functools

    import redis

    from asynqpy.redisio import upgrade

    monkeypatch.setattr(upgrade, "run_upgrade", functools.partial(run_upgrade, registry=TEST, target=2))
    r = redis.Redis.from_url(redis_url)
    _fill(redis_url, 2, 3)
    r.set(server_info("h:1:w"), server_record.pack("h:1:w", "h", 1, {"up0": 1}, 4, False, 1.7e9, [], "w"), px=60_000)
    r.zadd(SERVERS, {"h:1:w": int(time.time() * 1000) + 60_000})
    res = CliRunner().invoke(cli, ["upgrade", "--dry-run", "--redis-url", redis_url])
    assert res.exit_code == 0, res.output
    assert "test-index (1 -> 2): index every task in its queue's v2 hash (test only): 6 seen, 6 would change in" \
        in res.stdout and "would refuse: live server h:1:w" in res.stdout and r.get(PROTOCOL) == b"1", res.stdout
    res = CliRunner().invoke(cli, ["upgrade", "--redis-url", redis_url])
    assert res.exit_code == 2 and "1 live server(s) speak a protocol older than 2" in res.stderr, res.output
    res = CliRunner().invoke(cli, ["upgrade", "--force", "--batch", "2", "--redis-url", redis_url])
    assert res.exit_code == 0 and "6 changed" in res.stdout and "store: protocol 2" in res.stdout, res.output
    assert r.get(PROTOCOL) == b"2"
    r.delete(PROTOCOL)
