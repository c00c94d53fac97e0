"""The settings table (asynqpy/worker/settings.py SETTINGS) is the one list of server settings:
ServerOptions' fields, their validation, the ``asynqpy worker`` flags (and their environment
variables) and docs/workers.md's settings table all agree with it. The loop registry
(asynqpy/server.py SERVER_LOOPS) is what ``Server.arun`` starts and stops."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from helpers import serving

from asynqpy import InvalidArgumentError, ServeMux, Server
from asynqpy.server import SERVER_LOOPS
from asynqpy.worker.settings import SETTING, SETTINGS, ServerOptions, settings_table

ROOT = Path(__file__).resolve().parent.parent


def test_one_row_per_field_in_field_order_each_complete() -> None:
    assert [s.name for s in SETTINGS] == [f.name for f in fields(ServerOptions)]
    assert len(SETTING) == len(SETTINGS)
    for s in SETTINGS:
        assert s.doc and s.type and s.type != "any" and not s.doc.endswith("."), s.name
        if s.flag is not None:
            assert re.fullmatch(r"--[a-z-]+", s.flag.name) and s.env == s.flag.env, s.name
            assert re.fullmatch(r"ASYNQPY_[A-Z_]+", s.flag.env), s.name
    flags = [f for s in SETTINGS if s.flag for f in (s.flag.name, s.flag.short, s.flag.off) if f]
    envs = [s.env for s in SETTINGS if s.env]
    assert len(flags) == len(set(flags)) and len(envs) == len(set(envs))


def test_defaults_are_valid_and_every_setting_refuses_a_wrong_value() -> None:
    ServerOptions().validate()
    for s in SETTINGS:
        assert s.check(s.name, s.default) is not None or s.default is None
        with pytest.raises(InvalidArgumentError):
            ServerOptions(**{s.name: object()}).validate()  # type: ignore[arg-type]


def test_checks_keep_their_messages_and_normalize() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^concurrency must be an int >= 1, got 0$"):
        ServerOptions(concurrency=0).validate()
    with pytest.raises(InvalidArgumentError, match=r"^fetch_batch must be an int from 1 to 1000, got 1001$"):
        ServerOptions(fetch_batch=1001).validate()
    with pytest.raises(InvalidArgumentError, match=r"^lease must be a number of seconds > 0 \(at most 100 years\)"):
        ServerOptions(lease=0).validate()
    with pytest.raises(InvalidArgumentError, match=r"^unknown_type must be 'retry' or 'archive'$"):
        ServerOptions(unknown_type="drop").validate()  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"^need 0 < heartbeat_interval < lease$"):
        ServerOptions(lease=5, heartbeat_interval=5).validate()
    with pytest.raises(InvalidArgumentError, match=r"^group_max_size must be an int from 1 to"):
        ServerOptions(group_max_size=0).validate()
    assert ServerOptions(capture_logs=["a", "b"]).validate().capture_logs == frozenset({"a", "b"})
    assert ServerOptions(default_timeout=None, shutdown_timeout=0, reconcile_interval=0).validate()


def test_the_docs_table_is_the_table_the_settings_make() -> None:
    text = (ROOT / "docs" / "workers.md").read_text()
    block = text.split("<!-- settings:", 1)[1].split("<!-- end settings -->", 1)[0].split("-->", 1)[1].strip()
    assert block == settings_table(), (
        "docs/workers.md is stale: run python scripts/settings_table.py")
    for s in SETTINGS:
        assert f"| `{s.name}` |" in block
    out = subprocess.run([sys.executable, "scripts/settings_table.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_server_page_table_names_only_settings_of_the_table() -> None:
    """docs/server.md's table of the server's options (the README's, before issue 44 moved it)."""
    text = (ROOT / "docs" / "server.md").read_text()
    table = text.split("| option | default | meaning |", 1)[1].split("\n\n", 1)[0]
    names = [n for line in table.splitlines()[2:] for n in re.findall(r"`(\w+)`", line.split("|")[1])]
    assert names and set(names) <= set(SETTING)


def test_the_worker_command_has_a_flag_for_each_setting_that_has_one() -> None:
    from asynqpy.cli.main import worker

    assert isinstance(worker, click.Command)
    params = {p.name: p for p in worker.params if isinstance(p, click.Option)}
    for s in SETTINGS:
        if s.flag is None:
            assert s.name not in params, f"{s.name}: a flag written by hand? give its row a Flag"
            continue
        p = params[s.name]
        assert s.flag.name in p.opts and p.envvar == s.flag.env, s.name
        assert s.flag.short is None or s.flag.short in p.opts
        assert s.flag.off is None or s.flag.off in p.secondary_opts
    own = set(params) - set(SETTING)
    assert "processes" in own and "redis_url" in own  # the command's own flags, not settings


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> list[Server]:
    """The Servers `asynqpy worker` makes; run() returns at once."""
    made: list[Server] = []
    monkeypatch.setattr(Server, "run", lambda self, mux, **kw: made.append(self))
    monkeypatch.setattr(sys, "path", list(sys.path))
    return made


def _worker(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    from asynqpy.cli.main import main

    res = CliRunner().invoke(main, ["worker", "workers:mux", *args, "--redis-url", "redis://127.0.0.1:1/0"], env=env)
    return res.exit_code, res.stderr


def test_environment_variables_set_what_a_flag_does_and_a_flag_wins(servers: list[Server]) -> None:
    env = {"ASYNQPY_CONCURRENCY": "3", "ASYNQPY_QUEUES": "a=2,b", "ASYNQPY_FAIR": "1", "ASYNQPY_LEASE": "12",
           "ASYNQPY_WORKER_VERSION": "2.1", "ASYNQPY_SANDBOX_MAX_MEMORY": "64", "ASYNQPY_LOG_SUCCESS": "yes",
           "ASYNQPY_FAIL_FAST": "0"}
    code, err = _worker(env=env)
    assert code == 0, err
    o = servers.pop().options
    assert (o.concurrency, dict(o.queues), o.fair_dispatch, o.lease, o.version, o.sandbox_max_memory_mb) == \
        (3, {"a": 2, "b": 1}, True, 12.0, "2.1", 64)
    assert o.log_success is True and o.fail_fast is False
    code, err = _worker("--concurrency", "5", "--greedy", env=env)
    assert code == 0, err
    o = servers.pop().options
    assert (o.concurrency, o.fair_dispatch) == (5, False)
    code, err = _worker()
    assert code == 0, err
    assert servers.pop().options == Server(queues={"default": 1}, freeze_heap=True).options  # nothing given: the
    # defaults, but the heap frozen once warm (the worker command's process is only a worker: worker/heap.py)


@pytest.mark.parametrize("args, env, says", [
    (["--concurrency", "0"], None, "--concurrency"),
    (["--lease", "0.01"], None, "--lease"),
    (["--unknown-type", "drop"], None, "--unknown-type"),
    (["--metrics-port", "70000"], None, "--metrics-port"),
    ([], {"ASYNQPY_CONCURRENCY": "many"}, "ASYNQPY_CONCURRENCY"),
    (["--name", "a b"], None, "--name: "),
    (["--metrics-host", ""], None, "--metrics-host: metrics_host must be a host name or address"),
    (["--queues", "a=0"], None, "--queues: queue 'a' weight must be an int >= 1, got 0"),
    (["--lease", "5", "--heartbeat-interval", "5"], None, "need 0 < heartbeat_interval < lease"),
])
def test_a_bad_flag_value_is_one_line_exit_2(servers: list[Server], args: list[str], env: dict[str, str] | None,
                                           says: str) -> None:
    code, err = _worker(*args, env=env)
    assert code == 2 and err.count("\n") == 1 and err.startswith("asynqpy: error: ") and says in err, err
    assert not servers


def test_each_loop_says_when_it_runs() -> None:
    names = [s.name for s in SERVER_LOOPS]
    assert len(names) == len(set(names))
    assert names.index("heartbeat") < names.index("forwarder")  # the heartbeat starts before the loops
    assert sum(s.stop is not None for s in SERVER_LOOPS) == 1  # the heartbeat alone stops on its own, last

    def running(**options: Any) -> set[str]:
        o = Server(**options).options
        return {s.name for s in SERVER_LOOPS if s.when(o)}

    # (offload: made always, it returns at once when the server has no blob store)
    always = {"check-queues", "heartbeat", "forwarder", "recoverer", "janitor", "control", "propagator", "offload"}
    assert running() == always
    assert running(health_port=0) == always | {"ready-ping"}
    assert running(scheduler=True) == running(scheduler_owner="app:x") == always | {"scheduling"}
    assert running(group_aggregator=lambda g, ts: ("t", None)) == always | {"aggregation"}
    assert running(queues={"tenant-*": 1}) == always | {"discovery"}


def test_arun_starts_the_loops_the_options_call_for_and_stops_them(backend: Any) -> None:
    async def main() -> tuple[set[str], set[str]]:
        async with serving(backend.new_async(), ServeMux(), queues={"t-*": 1, "plain": 1}, scheduler=True):
            for _ in range(200):
                names = {t.get_name() for t in asyncio.all_tasks()}
                if "asynqpy-discovery" in names:
                    break
                await asyncio.sleep(0.01)
        after = {t.get_name() for t in asyncio.all_tasks() if not t.done()}
        return names, after

    names, after = asyncio.run(main())
    want = {f"asynqpy-{n}" for n in ("heartbeat", "forwarder", "recoverer", "janitor", "control", "propagator",
                                     "scheduling", "discovery")}
    assert want <= names and "asynqpy-aggregation" not in names and "asynqpy-ready-ping" not in names
    assert not {n for n in after if n.startswith("asynqpy-")}
