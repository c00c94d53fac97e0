"""TLS, AUTH and the minimal ACL documented in docs/security.md, against redis-servers started here (TLS
with a CA and certificates made with openssl at test time; ACL users made from its own
ACL SETUSER lines), and stopped at the end of the module."""

from __future__ import annotations

import asyncio
import gc
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from helpers import ROOT, serving, start_worker, until, wait_sync
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError
from redisproc import RedisCluster, RedisProcess, TlsFiles, make_tls_files

from asynqpy import AsyncClient, Client, Inspector, InvalidArgumentError, ServeMux, Server, SkipRetry, Task, TaskState
from asynqpy.cli.main import main as cli
from asynqpy.core.spine.broker import Broker
from asynqpy.redisio.executor import SyncExecutor
from asynqpy.redisio.scripts import load_functions, load_scripts

ADMIN_PW = "admin-pw"
ROLE_SCRIPTS = {  # which scripts each role runs (every script belongs to a role: checked below)
    "producer": {"enqueue", "enqueue_lone", "enqueue_many", "schedule", "watch", "group_add", "enqueue_target",
                 "register_child", "enqueue_after", "fail_waiting", "enqueue_keyed", "enqueue_keyed_many", "proc_start",
                 "proc_read", "proc_watch", "rules_take", "rules_push", "rules_dead", "rules_redrive"},
    "worker": {"dequeue", "done", "done_dequeue", "complete", "retry", "archive", "requeue", "extend", "forward", "expired",
               "drop", "expire", "trim", "reconcile", "sweep", "rewake", "reply", "progress", "forget_gone", "cron_fire",
               "aggregate", "snooze", "limit_acquire", "run_end", "resolve", "fail_waiting", "key_free", "key_gate",
               "proc_read", "proc_commit", "proc_step", "flow_read", "tenant_fix", "durable_emit", "wake_take"},
    "inspector": {"stats", "pause", "unpause", "page", "delete_tasks", "archive_tasks", "run_tasks", "cancel",
                  "drop_queue", "cron_fire", "cron_remove", "cron_pause", "edit_task", "ungroup", "run_end",
                  "set_workers", "proc_read", "flow_read", "set_tenant", "tenants", "hold", "search", "rewrap"},
    "control": set(),  # remote control: plain commands on its own key space (asynqpy-control:*)
}
CLUSTER_EXTRA = ["+cluster|slots", "+command"]
SECURITY = ROOT / "docs" / "security.md"  # the minimal ACL (the README's until issue 44 moved it)


def documented_acl() -> dict[str, list[str]]:
    """role -> the ACL SETUSER rules docs/security.md documents for it."""
    text = SECURITY.read_text()
    return {m[1]: [r.strip('"') for r in re.findall(r'"[^"]*"|\S+', m[2])]
            for m in re.finditer(r"^ACL SETUSER asynqpy-(\w+) (.+)$", text, re.MULTILINE)}


def create_users(admin: redis.Redis, extra: list[str] | None = None) -> None:
    for role, rules in documented_acl().items():
        rules = [f">{role}-pw" if r.startswith(">") else r for r in rules]
        admin.execute_command("ACL", "SETUSER", f"asynqpy-{role}", *rules, *(extra or []))


def run_cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


def _need(exe: str) -> None:
    if shutil.which(exe) is None:
        pytest.fail(f"{exe} is required for the security tests")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    _need("openssl")
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_server(tls_files: TlsFiles) -> Iterator[RedisProcess]:
    """TLS only, client certificates required, and a password for the default user."""
    _need("redis-server")
    proc = RedisProcess(tls=tls_files, password=ADMIN_PW)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisProcess]:
    """A password for the default user, and the three users of docs/security.md (password '<role>-pw')."""
    _need("redis-server")
    proc = RedisProcess(password=ADMIN_PW)
    create_users(proc.admin())
    load_functions(proc.admin())  # (the administrator's step of docs/security.md: no role may load them)
    yield proc
    proc.stop()


@pytest.fixture
def tls(tls_server: RedisProcess) -> RedisProcess:
    tls_server.admin().flushall()
    return tls_server


@pytest.fixture
def acl(acl_server: RedisProcess) -> RedisProcess:
    admin = acl_server.admin()
    admin.flushall()
    admin.execute_command("ACL", "LOG", "RESET")
    return acl_server


def idle_waits(admin: redis.Redis) -> int:
    """Connections blocked in BLPOP: a server's forwarder and, once its fetcher is idle, its
    pipelined idle wait (which shutdown must then end with CLIENT UNBLOCK)."""
    return sum(1 for c in admin.client_list() if c["cmd"] == "blpop" and "b" in c["flags"])


def role_url(server: RedisProcess, role: str) -> str:
    return server.url_for(f"asynqpy-{role}", f"{role}-pw")


# -- TLS ----------------------------------------------------------------------------------------


@pytest.mark.real
def test_client_worker_and_inspector_over_tls(tls: RedisProcess) -> None:
    url = tls.url
    admin = tls.admin()
    admin.config_resetstat()
    client = Client(url)
    client.enqueue("t", 1)
    client.enqueue_many([("t", 2), ("t", 3)])
    client.enqueue("t", 4, process_in=0.05)
    ran: list[int] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    async def main() -> None:
        async with AsyncClient(url) as ac:
            await ac.enqueue("t", 5)
        async with serving(url, mux, idle_timeout=2):
            await until(lambda: sorted(ran) == [1, 2, 3, 4, 5] and idle_waits(admin) == 2)
            client.enqueue("t", 6)  # wakes the idle wait on its dedicated TLS connection
            await until(lambda: len(ran) == 6 and idle_waits(admin) == 2)  # stopping it takes CLIENT UNBLOCK

    asyncio.run(main())
    stats = admin.info("commandstats")
    # the pipelined idle wait ran on its own connection and was unblocked at shutdown, over TLS
    assert stats["cmdstat_client|id"]["calls"] >= 1 and stats["cmdstat_client|unblock"]["calls"] >= 1
    assert all(c["user"] == "default" for c in admin.client_list())
    insp = Inspector(url)
    s = insp.stats("default")
    assert (s.processed, s.pending, s.failed) == (6, 0, 0)
    insp.pause("default")
    assert insp.stats("default").paused and insp.unpause("default")
    insp.close()
    client.close()


@pytest.mark.real
@pytest.mark.slow
def test_cli_worker_and_enqueue_over_tls_with_a_signing_key_file(tls: RedisProcess, tmp_path: Path) -> None:
    key_file = tmp_path / "asynqpy.key"
    key_file.write_text("# current key\n" + "ab" * 32 + "\n")
    for i in range(3):
        code, out, err = run_cli("enqueue", "noop", "--payload", str(i), "--signing-key-file", str(key_file),
                                 "--redis-url", tls.url)
        assert code == 0, err
    forged = Client(tls.url).enqueue("noop", "unsigned").id
    worker = start_worker(tls.url, "workers:mux", "--signing-key-file", str(key_file), "--concurrency", "2")
    try:
        insp = Inspector(tls.url)
        wait_sync(lambda: (s := insp.stats("default")).processed == 4 and s.archived == 1, timeout=20)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    s = insp.stats("default")
    assert (s.failed, s.pending, s.archived) == (1, 0, 1)
    info = insp.task_info("default", forged)
    assert info.state is TaskState.ARCHIVED and info.last_error.startswith("bad signature")


@pytest.mark.real
def test_bad_tls_settings_are_clear_errors(tls: RedisProcess, tmp_path: Path) -> None:
    base, files = tls.url, tls.tls
    assert files is not None
    missing = base.replace(f"ssl_ca_certs={files.ca}", "ssl_ca_certs=/no/such/ca.pem")
    bad_reqs = base.replace("ssl_cert_reqs=required", "ssl_cert_reqs=sometimes")
    for url, what in ((missing, "ssl_ca_certs"), (bad_reqs, "ssl_cert_reqs")):
        for make in (lambda: Client(url), lambda: AsyncClient(url), lambda: Inspector(url), lambda: Server(url)):
            with pytest.raises(InvalidArgumentError, match=what):
                make()
        code, _, err = run_cli("stats", "--redis-url", url)
        assert code == 2 and err.startswith(f"asynqpy: error: {what}") and err.count("\n") == 1, err
        assert ADMIN_PW not in err

    for url in ("foo://127.0.0.1", "redis://127.0.0.1:6379/0?db=zero", "redis+cluster://127.0.0.1:port"):
        with pytest.raises(InvalidArgumentError, match="bad Redis URL"):
            Client(url)
    code, _, err = run_cli("stats", "--redis-url", "foo://user:secret@127.0.0.1")
    assert code == 2 and err.startswith("asynqpy: error: bad Redis URL") and "secret" not in err

    other_ca = make_tls_files(tmp_path)  # certificates of a CA the server does not know
    wrong_ca = base.replace(str(files.ca), str(other_ca.ca))
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        Client(wrong_ca).enqueue("t")
    code, _, err = run_cli("enqueue", "t", "--redis-url", wrong_ca)
    assert code == 2 and "cannot reach Redis" in err and "certificate verify failed" in err and err.count("\n") == 1
    foreign_cert = base.replace(str(files.client_cert), str(other_ca.client_cert)).replace(
        str(files.client_key), str(other_ca.client_key))
    no_cert = base.split("&ssl_certfile")[0]
    plain = f"redis://:{ADMIN_PW}@127.0.0.1:{tls.port}/0"
    for url in (foreign_cert, no_cert, plain):
        with pytest.raises(redis.ConnectionError):
            Inspector(url).queues()
    assert tls.admin().dbsize() == 0  # nothing got through


# -- AUTH ---------------------------------------------------------------------------------------


@pytest.mark.real
def test_wrong_credentials_are_clear_errors(acl: RedisProcess) -> None:
    urls = {
        "wrong password": acl.url_for(password="nope"),
        "unknown user": acl.url_for("nobody", "x"),
        "ACL user, wrong password": acl.url_for("asynqpy-producer", "nope"),
        "no password": f"redis://127.0.0.1:{acl.port}/0",
    }
    for what, url in urls.items():
        with pytest.raises(AuthenticationError):
            Client(url).enqueue("t")
        with pytest.raises(AuthenticationError):
            Inspector(url).queues()

        async def serve() -> None:
            await asyncio.wait_for(Server(url).arun(ServeMux()), 10)

        with pytest.raises(AuthenticationError):
            asyncio.run(serve())
        expected = "requires a password" if what == "no password" else "refused the credentials"
        for args in (["stats"], ["enqueue", "t"], ["worker", "workers:mux"]):
            # the CLI's stderr is captured in this process: first collect the garbage earlier tests
            # left (an async cluster client nobody closed logs "Unclosed RedisCluster client" when
            # the cyclic collector finalizes it, at any moment: it once landed in this capture)
            gc.collect()
            code, _, err = run_cli(*args, "--redis-url", url)
            assert code == 2 and err.startswith("asynqpy: error: Redis ") and expected in err, (what, args, err)
            assert err.count("\n") == 1 and "nope" not in err and "Traceback" not in err
    assert acl.admin().dbsize() == 0


# -- the minimal ACL ----------------------------------------------------------------------------


def _script_commands(name: str) -> set[str]:
    """The commands a script calls (a MEMORY subcommand as the ACL names it: memory|usage)."""
    found = re.findall(r"redis\.p?call\('(\w+)'(?:,\s*'(\w+)')?", load_scripts()[name].source)
    return {f"{c}|{sub}".lower() if c.upper() == "MEMORY" else c.lower() for c, sub in found}


def test_documented_acl_covers_every_command_of_each_roles_scripts() -> None:
    acl = documented_acl()
    assert set(acl) == set(ROLE_SCRIPTS)
    assert set().union(*ROLE_SCRIPTS.values()) == set(load_scripts()), "assign every script to a role"
    for role, scripts in ROLE_SCRIPTS.items():
        rules = acl[role]
        assert rules[:3] == ["reset", "on", f">{role.upper()}_PASSWORD"]
        assert ("~asynqpy:*" in rules) == bool(scripts)  # control: no task key at all
        allowed = {c[1:] for r in rules for c in r.strip("()").split() if c.startswith("+")}
        assert {"fcall", "evalsha", "eval"} <= allowed or not scripts
        assert "function|load" not in allowed  # (a role that may load libraries may replace another's)
        for script in scripts:
            missing = _script_commands(script) - allowed
            assert not missing, f"{role} runs script {script} which calls {missing}"
    assert " ".join(CLUSTER_EXTRA) in SECURITY.read_text()


WRITES = {"hset", "hdel", "hincrby", "set", "del", "unlink", "lpush", "rpush", "lpop", "rpop", "lset", "lrem",
          "ltrim", "zadd", "zrem", "zincrby", "zremrangebyrank", "zremrangebyscore", "sadd", "srem", "xadd", "xdel",
          "incr", "incrby", "decrby", "expire", "pexpire", "persist", "publish", "rpoplpush", "blmove"}


def test_every_operator_script_is_refused_to_a_producer_before_its_first_write() -> None:
    """A script only operators (and workers) run, that writes, starts with a command the documented
    producer role does not hold (PERSIST, or EXISTS through includes/operator.lua): Redis refuses
    the whole script to a producer before anything changes (issue 42: hold.lua had no such guard,
    and a producer could block and unblock task types)."""
    allowed = {c[1:] for r in documented_acl()["producer"] for c in r.strip("()").split() if c.startswith("+")}
    unguarded = []
    for script in sorted(ROLE_SCRIPTS["inspector"] - ROLE_SCRIPTS["producer"] - ROLE_SCRIPTS["worker"]):
        path = ROOT / "lua" / f"{script}.lua"
        body = path.read_text().split("]]", 1)[1]  # the script's own body, after its header
        if not {c.lower() for c in re.findall(r"redis\.p?call\('(\w+)'", body)} & WRITES:
            continue  # reads only (page, stats, tenants: its includes' writes are not called)
        first = re.search(r"redis\.p?call\('(\w+)'|(operator_only|writable_when_full)\(", body)
        command = first and ({"operator_only": "exists", "writable_when_full": "persist"}.get(first[2] or "")
                             or first[1].lower())
        if command is None or command in allowed:
            unguarded.append(f"{script} (first command: {command})")
    assert not unguarded, f"operator scripts a producer could run: {unguarded}"


def _lifecycle_mux(ran: list[Any], started: asyncio.Event) -> ServeMux:
    mux = ServeMux()
    tries: dict[str, int] = {}

    @mux.handle("ok")
    async def ok(task: Task) -> None:
        ran.append(task.payload)

    @mux.handle("flaky")
    async def flaky(task: Task) -> None:
        tries[task.id] = tries.get(task.id, 0) + 1
        if tries[task.id] == 1:
            raise RuntimeError("first attempt fails")
        ran.append(task.payload)

    @mux.handle("bad")
    def bad(task: Task) -> None:
        raise SkipRetry("never")

    @mux.handle("keep")
    async def keep(task: Task) -> None:
        task.write_result({"kept": True})
        ran.append(task.payload)

    @mux.handle("slow")
    async def slow(task: Task) -> None:
        started.set()
        await asyncio.sleep(60)

    return mux


HARNESS = {"info", "config|resetstat", "flushall", "ping", "hello", "client|setinfo", "select"}
"""Commands the test itself (INFO, CONFIG RESETSTAT, FLUSHALL) or every connection's handshake
sends: not the role's."""


def _ran(admin: redis.Redis) -> set[str]:
    """The commands Redis ran since the last CONFIG RESETSTAT, those inside scripts included (INFO
    commandstats counts each command a script calls), as the ACL names them (client|id)."""
    return {k.removeprefix("cmdstat_") for k in admin.info("commandstats")} - HARNESS


def _allowed(role: str) -> set[str]:
    return {c[1:] for r in documented_acl()[role] for c in r.strip("()").split() if c.startswith("+")}


@pytest.mark.real
def test_each_roles_commands_derived_from_what_it_runs_are_in_the_readme(redis_url: str) -> None:
    """Issue 42 #19: the README's worker role lacked SCARD, which discovery by pattern runs, and
    no test saw it (the lifecycle test served fixed queues). Here each role's code paths run on
    their own against a redis-server, one role at a time, and the commands Redis ran for them
    (INFO commandstats: the ones inside scripts included) must all be in the role's documented ACL:
    a new code path with a new command fails here, whichever script or plain command it is."""
    admin = redis.Redis.from_url(redis_url)
    admin.flushall()
    load_functions(admin)  # (the administrator's step: the roles call them)
    derived: dict[str, set[str]] = {}

    admin.config_resetstat()  # -- producer: Client (enqueue in every form, results)
    with Client(redis_url) as p:
        p.enqueue("ok", 1)
        p.enqueue_many([("ok", i) for i in range(5)], queue="tenant-a", tenant="acme")
        p.enqueue("ok", "u", unique=60)
        p.enqueue("ok", "later", process_in=0.2)
        p.enqueue("bad", "bad", max_retry=0)
        p.enqueue("flaky", "f", retry_delay=0.05)
        kept = p.enqueue("keep", "k", retention=60, queue="tenant-b").id
        p.enqueue("ok", "g", group="g1")
        parent = p.enqueue("ok", "parent", task_id="parent").id
        p.enqueue("ok", "child", after=[parent])
        p.enqueue("ok", "keyed", key="acct")
        p.enqueue("ok", "keyed2", key="acct")
    derived["producer"] = _ran(admin)

    admin.config_resetstat()  # -- worker: a Server finding its queues by pattern, and fixed ones
    ran: list[Any] = []
    mux = _lifecycle_mux(ran, asyncio.Event())

    async def main() -> None:
        async with serving(redis_url, mux, queues={"tenant-*": 1, "default": 1}, idle_timeout=1,
                           shutdown_timeout=0.2, group_grace_period=0.1, group_max_delay=0.2):
            t0 = time.monotonic()
            while len(ran) < 13 and time.monotonic() - t0 < 15:  # (its handlers' own count: no command)
                await asyncio.sleep(0.05)

    asyncio.run(main())
    derived["worker"] = _ran(admin) - {"config|get"}  # (refused on purpose by the documented ACL)

    admin.config_resetstat()  # -- inspector: the operator's reads and actions
    with Inspector(redis_url) as insp:
        for q in insp.queues():
            insp.queue_info(q)
            for st in ("pending", "scheduled", "retry", "archived", "completed"):
                insp.list_tasks(q, st)
        insp.task_info("tenant-b", kept)
        insp.tenants("tenant-a")
        list(insp.events("default"))
        insp.block_type("default", "ok")
        insp.unblock_type("default", "ok")
        insp.pause("default")
        insp.unpause("default")
        insp.set_events("default", 5_000)
        insp.servers()
        for t in insp.list_tasks("default", "archived"):
            insp.run_task("default", t.id)
        insp.delete_all("default", "pending")
    derived["inspector"] = _ran(admin)

    assert "scard" in derived["worker"] and "fcall" in derived["producer"]  # (the paths ran)
    for role, commands in derived.items():
        missing = commands - _allowed(role)
        assert not missing, f"docs/security.md's {role} role lacks {sorted(missing)}, which its code paths run"


def _readyz(port: int) -> tuple[int, dict[str, Any]]:
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except urllib.error.URLError:
        return 0, {}


@pytest.mark.real
def test_a_pattern_worker_serves_under_the_readme_acl_and_is_not_ready_when_discovery_is_refused(
        acl: RedisProcess) -> None:
    """Issue 42 #19: under the README's worker role (which lacked SCARD) a worker finding its
    queues by pattern never served them, and /readyz said ready. Under the documented role it serves
    a matching queue; under a role without SCARD its /readyz says 503, status "discovering"."""
    from redisproc import free_port

    admin = acl.admin()
    rules = [r for r in documented_acl()["worker"] if r != "+scard"]
    admin.execute_command("ACL", "SETUSER", "asynqpy-oldworker", *[">old-pw" if r.startswith(">") else r
                                                                   for r in rules])
    ran: list[str] = []
    mux = ServeMux()
    mux.handle("report", lambda task: ran.append(task.queue))
    Client(role_url(acl, "producer")).enqueue("report", None, queue="tenant-acme")

    def serve(url: str) -> tuple[Server, Any, int]:
        import threading

        port = free_port()
        server = Server(url, queues={"tenant-*": 1}, heartbeat_interval=0.2, shutdown_timeout=1, health_port=port)
        th = threading.Thread(target=lambda: asyncio.run(server.arun(mux)), daemon=True)
        th.start()
        return server, th, port

    server, th, port = serve(acl.url_for("asynqpy-oldworker", "old-pw"))
    try:
        wait_sync(lambda: _readyz(port)[1].get("status") == "discovering", 15)
        code, body = _readyz(port)
        assert code == 503 and not body["ready"] and "scard" in body["discovery_error"].lower(), body
    finally:
        server.stop()
        th.join(15)
    server, th, port = serve(role_url(acl, "worker"))
    try:
        wait_sync(lambda: _readyz(port)[0] == 200, 15)
        Client(role_url(acl, "producer")).enqueue("report", None, queue="tenant-new")  # found by SCARD's look
        wait_sync(lambda: "tenant-new" in ran, 15)
        assert _readyz(port)[0] == 200
    finally:
        server.stop()
        th.join(15)
    admin.execute_command("ACL", "DELUSER", "asynqpy-oldworker")


@pytest.mark.real
def test_full_lifecycle_under_the_minimal_acl(acl: RedisProcess) -> None:
    # 'active' events always (by default only while a reader follows the stream): the worker's
    # dequeue writes them under its ACL too
    Inspector(role_url(acl, "inspector")).set_events("default", 10_000, active=True)
    producer = Client(role_url(acl, "producer"))
    producer.enqueue("ok", "one")
    producer.enqueue_many([("ok", f"batch{i}") for i in range(5)], queue="low")
    producer.enqueue("ok", "unique", unique=60)
    producer.enqueue("ok", "later", process_in=0.1)
    producer.enqueue("flaky", "flaky", retry_delay=0.05)
    bad = producer.enqueue("bad", "bad").id
    kept = producer.enqueue("keep", "keep", retention=60).id
    producer.enqueue("ok", "crashed", queue="crash")
    worker_sync = redis.Redis.from_url(role_url(acl, "worker"))
    taken = SyncExecutor(worker_sync).run(Broker().dequeue("crash", 1, 1, "deadbeef"))  # a worker that died
    assert len(taken.tasks) == 1
    ran: list[Any] = []
    admin = acl.admin()
    expected = ["one", *[f"batch{i}" for i in range(5)], "unique", "later", "flaky", "keep", "crashed"]

    async def main() -> None:
        started = asyncio.Event()
        async with serving(role_url(acl, "worker"), _lifecycle_mux(ran, started), queues=["default", "low", "crash"],
                           idle_timeout=1, shutdown_timeout=0.2):
            await until(lambda: sorted(ran) == sorted(expected))
            # results through the producer's inbox: call() (the outcome pushed by the worker's
            # finishing script) and result() (the watch script), on the producer's ACL
            assert await asyncio.to_thread(producer.call, "keep", "called", timeout=10) == {"kept": True}
            assert await asyncio.to_thread(producer.result, kept, timeout=10) == {"kept": True}
            producer.enqueue("slow", "slow")  # running at shutdown: requeued
            await asyncio.wait_for(started.wait(), 10)
            await until(lambda: idle_waits(admin) == 2)  # stopping it takes CLIENT UNBLOCK

    asyncio.run(main())
    insp = Inspector(role_url(acl, "inspector"))
    assert insp.queues() == ["crash", "default", "low"]
    seen = {e.event for e in insp.events("default")}  # written by every role's scripts, read by the inspector's
    assert {"enqueued", "active", "completed", "retry", "archived"} <= seen, seen
    by_queue = {s.queue: s for s in insp.all_stats()}
    d = by_queue["default"]
    assert (d.pending, d.active, d.archived, d.completed, d.retry, d.scheduled) == (1, 0, 1, 1, 0, 0)
    assert d.failed == 2 and by_queue["low"].processed == 5 and by_queue["crash"].processed == 2
    assert insp.task_info("default", bad).state is TaskState.ARCHIVED
    assert insp.task_info("default", kept).result == {"kept": True}
    assert insp.pause("default") and insp.unpause("default")
    for args in (["stats", "--redis-url", role_url(acl, "inspector")],
                 ["enqueue", "ok", "--payload", '"cli"', "--redis-url", role_url(acl, "producer")]):
        code, _, err = run_cli(*args)
        assert code == 0, err
    refused = {(e["username"], e["object"]) for e in admin.acl_log()}
    assert refused == {("asynqpy-worker", "config|get")}  # only the optional maxmemory-policy check


@pytest.mark.real
def test_durable_processes_under_the_minimal_acl(acl: RedisProcess) -> None:
    """A producer starts, calls, fails, repairs and removes a process; a worker runs its inputs;
    an inspector lists and reads it and removes its queue: each on its role's ACL."""
    from asynqpy import Input, Process, ProcessError, Step, TaskFailedError

    mux = ServeMux()

    @mux.process("acct")
    async def acct(p: Process, i: Input) -> Step:
        if i.args == "fail":
            raise RuntimeError("no")
        return Step(events=[i.kind], state=(p.state or 0) + 1, response=i.kind, timer=60 if i.kind == "init" else None)

    producer = Client(role_url(acl, "producer"))
    assert producer.start_process("acct", "a1", queue="procs")

    async def main() -> None:
        async with serving(role_url(acl, "worker"), mux, queues=["procs"], idle_timeout=1, shutdown_timeout=0.2):
            assert await asyncio.to_thread(producer.call_process, "a1", "x", queue="procs", timeout=10) == "call"
            with pytest.raises(TaskFailedError):
                await asyncio.to_thread(producer.call_process, "a1", "fail", queue="procs", timeout=10, max_retry=0)
            with pytest.raises(ProcessError):
                await asyncio.to_thread(producer.call_process, "a1", "x", queue="procs", timeout=10)
            assert await asyncio.to_thread(producer.repair_process, "a1", queue="procs", timeout=10) == "repair"
            producer.start_process("acct", "a2", queue="procs")
            assert await asyncio.to_thread(producer.remove_process, "a2", queue="procs", timeout=10)

    asyncio.run(main())
    insp = Inspector(role_url(acl, "inspector"))
    total, procs = insp.processes("procs")
    assert total == 1 and procs[0].id == "a1" and procs[0].status == "running" and procs[0].state == 3
    assert [e.data for e in insp.process("procs", "a1").history] == ["init", "call", "repair"]
    insp.remove_queue("procs", force=True)
    assert insp.processes("procs") == (0, [])
    refused = {(e["username"], e["object"]) for e in acl.admin().acl_log()}
    assert refused <= {("asynqpy-worker", "config|get")}, refused


@pytest.mark.real
def test_offloaded_payloads_under_the_minimal_acl(acl: RedisProcess, tmp_path: Path) -> None:
    """docs/offload.md: the producer stores a blob and enqueues its reference, the worker reads it,
    its done records the blob (SADD in the script) and its offload loop drains it (SRANDMEMBER,
    SREM), the inspector's delete records one too: each on its role's ACL, nothing refused."""
    from asynqpy import FileBlobStore

    store = FileBlobStore(tmp_path, threshold=100)
    producer = Client(role_url(acl, "producer"), offload=store)
    producer.enqueue("ok", "x" * 1000)
    deleted = producer.enqueue("ok", "y" * 1000, process_in=3600).id
    Inspector(role_url(acl, "inspector")).delete_task("default", deleted)
    ran: list[Any] = []
    mux = ServeMux()
    mux.handle("ok")(lambda task: ran.append(task.payload))

    async def main() -> None:
        async with serving(role_url(acl, "worker"), mux, offload=store, idle_timeout=1, shutdown_timeout=0.2):
            await until(lambda: ran == ["x" * 1000] and list(store.list()) == [])

    asyncio.run(main())
    refused = {(e["username"], e["object"]) for e in acl.admin().acl_log()}
    assert refused <= {("asynqpy-worker", "config|get")}  # only the optional maxmemory-policy check


def test_the_acl_refuses_what_a_role_does_not_need(acl: RedisProcess) -> None:
    acl.admin().set("secret", "s")
    producer = redis.Redis.from_url(role_url(acl, "producer"))
    worker = redis.Redis.from_url(role_url(acl, "worker"))
    inspector = redis.Redis.from_url(role_url(acl, "inspector"))
    refused: list[tuple[redis.Redis, tuple[Any, ...]]] = [
        (producer, ("FLUSHALL",)),
        (producer, ("GET", "secret")),  # a key outside asynqpy:*
        (producer, ("KEYS", "*")),
        (producer, ("BLPOP", "asynqpy:{default}:wake", 0.01)),
        (producer, ("CLIENT", "KILL", "ID", "1")),
        (producer, ("CONFIG", "SET", "maxmemory", "1")),
        (producer, ("EVAL", "return redis.call('FLUSHALL')", 0)),  # a script gets no more than the user
        (producer, ("EVAL", "return redis.call('GET', KEYS[1])", 1, "secret")),
        (producer, ("EVAL", "return redis.call('UNLINK', KEYS[1])", 1, "asynqpy:{default}:t")),
        (worker, ("FLUSHDB",)),
        (worker, ("SET", "secret", "overwritten")),
        (worker, ("CONFIG", "GET", "requirepass")),
        (worker, ("EVAL", "return redis.call('SCAN', 0)", 0)),
        (inspector, ("BLPOP", "asynqpy:{default}:wake", 0.01)),
        (inspector, ("FLUSHALL",)),
        (inspector, ("SUBSCRIBE", "other")),
    ]
    for client, command in refused:
        with pytest.raises(ResponseError) as exc:
            client.execute_command(*command)
        text = str(exc.value).lower()  # inside a script: "the user executing the script can't ..."
        assert isinstance(exc.value, NoPermissionError) or re.search("permission|can't run|can't access", text), command
    assert acl.admin().get("secret") == b"s"


def _refused(fn: Any) -> None:
    """``fn()`` is refused by the ACL (a plain command's NOPERM, or a script's command refused)."""
    with pytest.raises(ResponseError) as exc:
        fn()
    text = str(exc.value).lower()
    assert isinstance(exc.value, NoPermissionError) or re.search("permission|can't run|can't access", text), text


@pytest.mark.real
def test_each_role_is_refused_what_it_does_not_need_and_control_has_its_own(acl: RedisProcess) -> None:
    """The producer cannot stop, quiet or resume a server (remote control lives in its own key
    space, outside ~asynqpy:*), nor delete, archive, pause, edit, run or retarget tasks (those
    scripts start with a command it does not hold); the inspector cannot control servers
    either; the control role controls servers and touches no task; an operator given the documented
    control selector does both. Refused writes change nothing."""
    admin = acl.admin()
    page = SECURITY.read_text()
    selector = re.search(r'ACL SETUSER asynqpy-inspector "(\([^)]*\))"', page.replace("\n  ", " "))
    assert selector, "docs/security.md shows how to give an operator the control role's rights"
    admin.execute_command("ACL", "SETUSER", "asynqpy-operator", *[">op-pw" if r.startswith(">") else r
                                                                 for r in documented_acl()["inspector"]],
                          selector[1])
    producer = Client(role_url(acl, "producer"))
    victim = producer.enqueue("ok", "victim", process_in=3600).id
    producer.enqueue("ok", "grouped", group="g", task_id="g1")
    producer.enqueue("ok", "targeted", workers=["w1"], task_id="m1")
    pinsp, insp = Inspector(role_url(acl, "producer")), Inspector(role_url(acl, "inspector"))
    ctl, operator = Inspector(role_url(acl, "control")), Inspector(acl.url_for("asynqpy-operator", "op-pw"))
    raw_producer = redis.Redis.from_url(role_url(acl, "producer"))

    async def main() -> None:
        async with serving(role_url(acl, "worker"), _lifecycle_mux([], asyncio.Event()), queues=["default"],
                           idle_timeout=1) as server:
            await until(lambda: admin.zcard("asynqpy:servers") == 1)
            sid = admin.zrange("asynqpy:servers", 0, -1)[0].decode()
            for attempt in (lambda: pinsp.delete_task("default", victim),
                            lambda: pinsp.archive_task("default", victim),
                            lambda: pinsp.pause("default"),
                            lambda: pinsp.edit_task("default", victim, payload="changed"),
                            lambda: pinsp.run_task("default", victim),
                            lambda: pinsp.delete_task("default", "g1"),
                            lambda: pinsp.set_workers("default", "m1", ["w2"]),
                            lambda: pinsp.delete_task("default", "m1"),  # a targeted task: run_end's D
                            lambda: pinsp.block_type("default", "ok"),  # deploy holds (hold.lua)
                            lambda: pinsp.unblock_type("default", "ok"),
                            lambda: SyncExecutor(raw_producer).run(Broker().cancel(  # cancel, sent raw
                                "default", victim, "12345678", b"x", "", b"n")),
                            lambda: pinsp.stop_server(sid, timeout=1),
                            lambda: raw_producer.rpush(f"asynqpy-control:{sid}", b"\x92\xa2c1\xa4stop"),
                            lambda: insp.stop_server(sid, timeout=1),
                            lambda: ctl.delete_task("default", victim),
                            lambda: ctl.task_info("default", victim)):
                await asyncio.to_thread(_refused, attempt)
            raw_producer.rpush(f"asynqpy:control:{sid}", b"\x92\xa2c1\xa4stop")  # the old key: nobody reads it
            assert await asyncio.to_thread(ctl.quiet_server, sid) == "quiet"  # still running
            assert await asyncio.to_thread(operator.resume_server, sid) == "running"
            assert [s.id for s in await asyncio.to_thread(ctl.servers)] == [sid]
            assert await asyncio.to_thread(ctl.stop_server, sid) == "stopping"
            await until(lambda: admin.zcard("asynqpy:servers") == 0)
            assert server is not None

    asyncio.run(main())
    info = insp.task_info("default", victim)  # nothing refused changed anything, not even half-way
    assert info.state is TaskState.SCHEDULED and info.payload == "victim"
    assert insp.task_info("default", "g1").state is TaskState.AGGREGATING and admin.zcard("asynqpy:{default}:g:g") == 1
    assert insp.task_info("default", "m1").workers == ["w1"]
    assert insp.task_info("default", "m1").state is TaskState.TARGETED
    assert not insp.stats("default").paused
    refused = {e["username"] for e in admin.acl_log(count=100)}
    assert refused == {"asynqpy-producer", "asynqpy-inspector", "asynqpy-control", "asynqpy-worker"}
    worker = {e["object"] for e in admin.acl_log(count=100) if e["username"] == "asynqpy-worker"}
    assert worker == {"config|get"}  # the worker and the operator were refused nothing they use
    admin.execute_command("ACL", "DELUSER", "asynqpy-operator")


@pytest.mark.real
def test_a_role_that_finds_the_libraries_missing_runs_its_scripts_by_evalsha(acl: RedisProcess) -> None:
    """The documented roles may call the scripts' functions, not load them: a producer that finds
    them missing (a Redis restarted without persistence, a new version not loaded yet) is refused
    their load once and goes on with EVALSHA (and EVAL); nothing else is refused."""
    admin = acl.admin()
    admin.execute_command("FUNCTION", "FLUSH")
    try:
        with Client(role_url(acl, "producer")) as producer:
            producer.enqueue("ok", "one")
            producer.enqueue("ok", "two")
            producer.enqueue_many([("ok", "three"), ("ok", "four")])
        assert Inspector(role_url(acl, "inspector")).queue_info("default").pending == 4
        refused = {(e["username"], e["object"]): e["count"] for e in admin.acl_log()}
        assert refused == {("asynqpy-producer", "function|load"): 1,  # once each: then EVALSHA
                           ("asynqpy-inspector", "function|load"): 1}
        assert admin.execute_command("FUNCTION", "LIST") == []
    finally:
        load_functions(admin)


@pytest.mark.cluster
def test_minimal_acl_on_redis_cluster(cluster_server: RedisCluster) -> None:
    cluster_server.flush()
    admins = [redis.Redis(port=n.port) for n in cluster_server.nodes]
    for a in admins:
        create_users(a, CLUSTER_EXTRA)
        if a.info("replication")["role"] == "master":
            load_functions(a)  # (the administrator's step: on every master)
        a.execute_command("ACL", "LOG", "RESET")
    nodes = cluster_server.url.split("://", 1)[1]
    url = {role: f"redis+cluster://asynqpy-{role}:{role}-pw@{nodes}" for role in ROLE_SCRIPTS}
    try:
        with Client(url["producer"]) as producer:
            producer.enqueue("ok", "one")
            producer.enqueue_many([("ok", f"b{i}") for i in range(4)], queue="low")
            producer.enqueue("ok", "later", process_in=0.05, queue="low")
        ran: list[Any] = []

        async def main() -> None:
            async with serving(url["worker"], _lifecycle_mux(ran, asyncio.Event()), queues=["default", "low"],
                               idle_timeout=1):
                await until(lambda: len(ran) == 6, timeout=20)

        asyncio.run(main())
        insp = Inspector(url["inspector"])
        assert sum(s.processed for s in insp.all_stats()) == 6
        insp.close()
        refused = {(e["username"], e["object"]) for a in admins for e in a.acl_log()}
        assert refused <= {("asynqpy-worker", "config|get")}  # only the optional maxmemory-policy check
    finally:
        for a in admins:
            a.execute_command("ACL", "DELUSER", *(f"asynqpy-{r}" for r in ROLE_SCRIPTS))
