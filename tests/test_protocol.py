"""The wire protocol's version (issue 47 #1, docs/protocol.md): stamped in ``asynqpy:protocol`` by
the first writer that finds none, read once per client and per worker start; a store of a newer
protocol (or a key that holds no version) is refused by a client, an inspector, a worker and every
CLI command, before anything is written. On fakeredis (``memory://``), a real redis-server and a
real Redis Cluster (the key is in its own slot: plain commands, no script)."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import ROOT

import asynqpy
from asynqpy import AsyncClient, AsyncInspector, Client, Inspector, ProtocolVersionError, Scheduler, ServeMux, Server
from asynqpy.cli.main import main as cli
from asynqpy.core.spine import protocol
from asynqpy.core.spine.keys import PROTOCOL
from asynqpy.redisio.connection import sync_client

_names = itertools.count()


@pytest.fixture(params=["fake", "real", pytest.param("cluster", marks=pytest.mark.cluster)])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL of an empty store: an in-process one (memory://, fakeredis), the real redis-server,
    the real Redis Cluster. The protocol key a test stamped (a newer version, garbage) is deleted
    after it: the servers are the session's, and a later test of this worker (one that does not
    flush, on its own queues) met a damaged store and was refused."""
    if request.param == "fake":
        yield f"memory://protocol-{next(_names)}"
        return
    if request.param == "real":
        url = str(request.getfixturevalue("redis_server").url)
        sync_client(url).flushall()
    else:
        url = str(request.getfixturevalue("cluster_url"))
    yield url
    client = sync_client(url)
    client.delete(PROTOCOL)
    client.close()


@pytest.fixture
def r(url: str) -> Iterator[Any]:
    client = sync_client(url)
    yield client
    client.close()


def snapshot(r: Any) -> dict[bytes, Any]:
    """Every key (on a cluster: of every master) and its dump."""
    keys = r.keys("*", target_nodes="all") if hasattr(r, "get_nodes") else r.keys("*")
    return {k: r.dump(k) for k in keys}


def cli_run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_a_writer_stamps_an_absent_store_and_a_reader_leaves_it(url: str, r: Any) -> None:
    with Inspector(url) as insp:
        assert insp.queues() == []
    assert r.get(PROTOCOL) is None  # an inspector reads; it does not stamp
    with Client(url) as c:
        c.enqueue("t", 1)
    assert r.get(PROTOCOL) == str(protocol.ABSENT_MEANS).encode() == str(protocol.PROTOCOL_VERSION).encode()
    r.set(PROTOCOL, "1")

    async def produce() -> None:
        async with AsyncClient(url) as ac:
            await ac.enqueue("t", 2)
        async with AsyncInspector(url) as ai:
            assert (await ai.stats("default")).pending == 2

    asyncio.run(produce())
    assert r.get(PROTOCOL) == b"1"


def test_the_check_runs_once_per_client_not_per_call(url: str, r: Any) -> None:
    """A client checked the store at its first call; later calls send no GET of the key (a store
    stamped newer afterwards, by hand here, is only met by the next client or worker start)."""
    with Client(url) as c:
        c.enqueue("t", 1)
        r.set(PROTOCOL, str(protocol.PROTOCOL_VERSION + 1))
        c.enqueue("t", 2)  # no second check
        c.enqueue_many([("t", 3), ("t", 4)])
    with pytest.raises(ProtocolVersionError), Client(url) as fresh:
        fresh.enqueue("t", 5)
    r.set(PROTOCOL, "1")
    with Inspector(url) as insp:
        assert insp.stats("default").pending == 4


def _newer(r: Any) -> int:
    newer = protocol.PROTOCOL_VERSION + 1
    r.set(PROTOCOL, str(newer))
    return newer


def test_a_newer_store_is_refused_by_clients_inspectors_a_scheduler_and_a_worker_and_nothing_is_written(
        url: str, r: Any) -> None:
    newer = _newer(r)
    before = snapshot(r)
    with Client(url) as c:
        for call in (lambda: c.enqueue("t", 1), lambda: c.enqueue_many([("t", 1), ("t", 2)]),
                     lambda: c.enqueue("t", 1, process_in=60), lambda: c.pause("default")):
            with pytest.raises(ProtocolVersionError) as caught:
                call()
            assert caught.value.stored == newer and caught.value.understood == (protocol.OLDEST_READ,
                                                                                 protocol.PROTOCOL_VERSION)
            assert f"protocol {newer}" in str(caught.value) and "nothing was written" in str(caught.value)
    with Inspector(url) as insp, pytest.raises(ProtocolVersionError):
        insp.stats("default")

    async def others() -> None:
        async with AsyncClient(url) as ac:
            with pytest.raises(ProtocolVersionError):
                await ac.enqueue("t", 1)
        async with AsyncInspector(url) as ai:
            with pytest.raises(ProtocolVersionError):
                await ai.queues()
        with pytest.raises(ProtocolVersionError):  # the worker refuses at start, before its first write
            await asyncio.wait_for(Server(url, queues={"default": 1}, fail_fast=True).arun(ServeMux()), 20)
        with pytest.raises(ProtocolVersionError):
            await asyncio.wait_for(Server(url, queues={"default": 1}).arun(ServeMux()), 20)
        sched = Scheduler(url)  # its loop logs the refusal and tries again later: nothing written meanwhile
        sched.register("tick", "t", every=1)
        running = asyncio.create_task(sched.arun())
        await asyncio.sleep(1.5)
        sched.stop()
        await asyncio.wait_for(running, 10)

    asyncio.run(others())
    assert snapshot(r) == before


def test_the_cli_refuses_a_newer_store_in_one_line_exit_2(url: str, r: Any) -> None:
    _newer(r)
    before = snapshot(r)
    for args in (["enqueue", "t", "--payload", "1"], ["stats"], ["queue", "ls"], ["server", "ls"],
                 ["task", "ls", "--queue", "default"]):
        code, out, err = cli_run(*args, "--redis-url", url)
        assert code == 2 and out == "", (args, code, out, err)
        assert re.fullmatch(r"asynqpy: error: this Redis holds asynqpy protocol \d+, newer than asynqpy \S+ "
                            r"understands .*nothing was written\n", err), (args, err)
    assert snapshot(r) == before


@pytest.mark.real
def test_the_worker_command_refuses_a_newer_store_in_one_line_exit_2(redis_url: str) -> None:
    r = sync_client(redis_url)
    _newer(r)
    before = snapshot(r)
    res = subprocess.run([sys.executable, "-m", "asynqpy.cli.main", "worker", "workers:mux", "--redis-url", redis_url],
                         cwd=ROOT / "tests", capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "protocol" in ln]
    assert len(lines) == 1 and "newer than asynqpy" in lines[0] and "Traceback" not in res.stderr, res.stderr
    assert snapshot(r) == before
    r.delete(PROTOCOL)  # (the session's server: see ``url``)


@pytest.mark.parametrize("stored", [b"x", b"", b"-1", b"0", b"1.5", b"99999999999", "²".encode()])
def test_a_key_that_holds_no_version_is_refused(url: str, r: Any, stored: bytes) -> None:
    r.set(PROTOCOL, stored)
    with pytest.raises(ProtocolVersionError, match="not a protocol version") as caught, Client(url) as c:
        c.enqueue("t", 1)
    assert caught.value.stored is None
    assert list(snapshot(r)) == [PROTOCOL.encode()]


def test_an_older_store_than_a_release_reads_asks_for_an_upgrade(url: str, r: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that no longer reads protocol 1 (none yet: OLDEST_READ is 1) refuses a store of
    it, pointing at ``asynqpy upgrade``."""
    with Client(url) as c:
        c.enqueue("t", 1)
    monkeypatch.setattr(protocol, "OLDEST_READ", 2)
    monkeypatch.setattr(protocol, "PROTOCOL_VERSION", 2)
    with pytest.raises(ProtocolVersionError, match="older than asynqpy .* reads .*asynqpy upgrade") as caught, \
            Client(url) as c2:
        c2.enqueue("t", 2)
    assert caught.value.stored == 1


def test_read_version() -> None:
    assert protocol.read_version(None) == protocol.ABSENT_MEANS
    assert protocol.read_version(b"1") == protocol.read_version("1") == 1
    with pytest.raises(ProtocolVersionError, match=r"protocol 2, newer"):
        protocol.read_version(b"2")


def test_the_versions_agree() -> None:
    """pyproject.toml, asynqpy.__version__ and core/spine/protocol.py name one version; CHANGELOG.md's
    newest release heading names it too, and docs/releases.md the protocol versions it reads."""
    found = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert found is not None
    project = found.group(1)
    assert project == asynqpy.__version__ == protocol.LIBRARY_VERSION
    changelog = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.MULTILINE)
    assert released and released[0] == project, released
    releases = (ROOT / "docs" / "releases.md").read_text()
    assert f"| {project} | {protocol.PROTOCOL_VERSION} | {protocol.OLDEST_READ} to {protocol.PROTOCOL_VERSION} |" \
        in releases


def _register(r: Any, server_id: str, record: bytes) -> None:
    """A live server's record and heartbeat, as a heartbeat writes them (worker/heartbeat.py)."""
    import time

    from asynqpy.core.spine.keys import SERVERS, server_info

    r.set(server_info(server_id), record, px=60_000)
    r.zadd(SERVERS, {server_id: int(time.time() * 1000) + 60_000})


@pytest.mark.real
def test_server_ls_and_the_console_show_the_release_each_server_runs(redis_url: str) -> None:
    """A server's record carries its asynqpy release and protocol (core/server/record.py); one
    written by a release older than the fields shows '?'."""
    import msgpack
    from fastapi.testclient import TestClient

    from asynqpy.core.server import record as server_record
    from asynqpy.web import create_app

    r = sync_client(redis_url)
    r.flushall()
    _register(r, "h:1:new", server_record.pack("h:1:new", "h", 1, {"default": 1}, 4, False, 1.7e9, [], "fresh"))
    old = msgpack.unpackb(server_record.pack("h:2:old", "h", 2, {"default": 1}, 4, False, 1.7e9, [], "legacy"))
    del old["asynqpy"], old["protocol"]
    _register(r, "h:2:old", msgpack.packb(old))
    code, out, err = cli_run("server", "ls", "--redis-url", redis_url)
    assert code == 0, err
    rows = {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("h:")}
    assert "asynqpy" in out.splitlines()[0].split()
    assert rows["fresh"][2] == protocol.LIBRARY_VERSION and rows["legacy"][2] == "?", out
    code, out, err = cli_run("server", "ls", "--json", "--redis-url", redis_url)
    listed = {s["name"]: s for s in json.loads(out)}
    assert (listed["fresh"]["asynqpy_version"], listed["fresh"]["protocol"]) == (protocol.LIBRARY_VERSION, 1)
    assert (listed["legacy"]["asynqpy_version"], listed["legacy"]["protocol"]) == ("", 0)
    with TestClient(create_app(redis_url), base_url="http://localhost") as web:
        page = web.get("/servers").text
        assert "<th>asynqpy</th>" in page and f"<td>{protocol.LIBRARY_VERSION}</td>" in page and "<td>?</td>" in page
        assert f"this console runs asynqpy {protocol.LIBRARY_VERSION}" in page
        api = {s["name"]: s for s in web.get("/api/servers").json()}
        assert api["fresh"]["asynqpy_version"] == protocol.LIBRARY_VERSION
