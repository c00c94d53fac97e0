"""The CLI through click's runner against the real redis-server: output, exit codes, error lines."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner
from helpers import ROOT, loaded
from redisproc import free_port

from asynqpy import Client, Inspector, InvalidArgumentError, ServeMux, Server, ServerOptions
from asynqpy.cli.main import main, parse_queues
from asynqpy.core.model.codec import Message, decode
from asynqpy.core.spine.keys import queue_keys

pytestmark = pytest.mark.real


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_enqueue_then_stats_table_and_json(redis_url: str) -> None:
    code, out, _ = run("enqueue", "email:deliver", "--payload", '{"user_id": 42}', "--queue", "critical", "--redis-url", redis_url)
    assert code == 0 and "enqueued" in out and "critical: pending" in out
    code, out, _ = run("enqueue", "report", "--in", "60", "--redis-url", redis_url)
    assert code == 0 and "scheduled (due" in out
    with Client(redis_url) as c:
        c.enqueue("x", None, queue="low")
    code, out, _ = run("stats", "--redis-url", redis_url)
    assert code == 0
    for word in ("critical", "default", "low", "pending", "scheduled", "archived"):
        assert word in out
    code, out, _ = run("stats", "--json", "--redis-url", redis_url)
    rows = {r["queue"]: r for r in json.loads(out)}
    assert rows["critical"]["pending"] == 1 and rows["default"]["scheduled"] == 1 and rows["low"]["size"] == 1
    id = out and Inspector(redis_url).stats("critical").pending
    assert id == 1


def test_env_var_gives_the_default_url(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNQPY_REDIS_URL", redis_url)
    code, out, _ = run("enqueue", "t")
    assert code == 0
    assert Inspector(redis_url).stats("default").pending == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["enqueue", "t", "--payload", "{not json"], "--payload is not valid JSON"),
        (["enqueue", "t", "--queue", "bad queue"], "invalid queue name"),
        (["enqueue", "", "--payload", "1"], "task type must be a non-empty string"),
        (["enqueue", "ok\nERROR forged", "--payload", "1"], "holds a control character (U+000A"),
        (["enqueue", "t", "--task-id", "a\x00b"], "--task-id 'a\\x00b' holds a control character"),
        (["enqueue", "t", "--in", "-5"], "--in must be >= 0"),  # the flag, not the library's process_in
        (["worker", "nomodule", "--queues", "default"], "expected module:attribute"),
        (["worker", "no.such.module:mux"], "cannot import"),
        (["worker", "json:dumps"], "'json:dumps' is a function, not a ServeMux"),
        (["worker", "..:mux"], "cannot import"),  # relative names: a TypeError traceback (found by fuzzing)
        (["worker", ".workers:mux"], "cannot import"),
        (["worker", "x:y", "--queues", "a=notanumber"], "bad queue weight"),
        (["worker", "x:y", "--queues", "ok,t-{*}=1"], "--queues: invalid queue pattern 't-{*}'"),
        (["worker", "x:y", "--queues", "bad queue"], "--queues: invalid queue name 'bad queue'"),
    ],
)
def test_user_errors_one_line_exit_2(redis_url: str, args: list[str], message: str) -> None:
    with Client(redis_url) as c:
        kept = c.enqueue("keep", 1)
    code, out, err = run(*args, "--redis-url", redis_url)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("asynqpy: error:") and message in err, err
    assert "Traceback" not in err
    assert Inspector(redis_url).task_info("default", kept.id).state.value == "pending"  # nothing lost


def test_unreachable_redis_is_a_clear_error() -> None:
    port = free_port()  # an unreachable cluster was a RedisClusterException traceback, exit 1 (found by fuzzing)
    for url in (f"redis://127.0.0.1:{port}/0", f"redis+cluster://127.0.0.1:{port}"):
        for args in (["stats"], ["enqueue", "t"]):
            code, _, err = run(*args, "--redis-url", url)
            assert code == 2 and err.startswith("asynqpy: error: cannot reach Redis") and err.count("\n") == 1, err


@pytest.mark.parametrize("url", ["foo", "redis://127.0.0.1:abc/0", "redis://127.0.0.1:99999/0",
                                 "redis+cluster://127.0.0.1:abc", "redis://127.0.0.1:1/0?socket_timeout=abc"])
def test_bad_redis_url_is_a_user_error(url: str) -> None:
    """A malformed --redis-url was a ValueError traceback with exit code 1 (found by fuzzing)."""
    for args in (["stats"], ["enqueue", "t"]):
        code, _, err = run(*args, "--redis-url", url)
        assert code == 2 and err.startswith("asynqpy: error: bad Redis URL") and err.count("\n") == 1, err


def test_help_and_queue_spec() -> None:
    code, out, _ = run("--help")
    assert code == 0 and "worker" in out and "enqueue" in out and "stats" in out
    assert parse_queues("critical=6,default=3, low") == {"critical": 6, "default": 3, "low": 1}


# -- loading the worker's ServeMux: errors that say what is wrong, and where -----------------------

USER_MODULES = {
    "qs_good": "from asynqpy import ServeMux\n\nmux = ServeMux()\ncount = 3\n\n\ndef handler(task):\n    pass\n",
    "qs_syntax": "from asynqpy import ServeMux\n\nmux = ServeMux(\n",
    "qs_raises": "import os\n\n\ndef setup():\n    raise RuntimeError('no DATABASE_URL set')\n\n\nsetup()\n",
    "qs_imports": "import os\nimport qs_no_such_library\n",
    "qs_imports_name": "from os import qs_no_such_name\n",
    "qs_library": "import json\n\nSETTINGS = json.loads('{not json')\n",
}


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory holding the user modules above, the current directory (as for `asynqpy worker`
    started there); the modules are forgotten afterwards."""
    for name, code in USER_MODULES.items():
        (tmp_path / f"{name}.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in USER_MODULES:
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    "target, lines",
    [
        ("qs_good:app", ["module 'qs_good' (qs_good.py) has no attribute 'app'; did you mean 'qs_good:mux'?"]),
        ("qs_good:count", ["'qs_good:count' is an int object, not a ServeMux; did you mean 'qs_good:mux'?"]),
        ("qs_good:handler", ["'qs_good:handler' is a function, not a ServeMux; did you mean 'qs_good:mux'?"]),
        ("qs_syntax:mux", ["cannot import 'qs_syntax': qs_syntax.py, line 3: SyntaxError: '(' was never closed",
                           "    mux = ServeMux("]),
        ("qs_raises:mux", [("cannot import 'qs_raises': qs_raises.py, line 5 (in setup): "
                            "RuntimeError: no DATABASE_URL set"), "    raise RuntimeError('no DATABASE_URL set')"]),
        ("qs_imports:mux", [("cannot import 'qs_imports': qs_imports.py, line 2: "
                             "ModuleNotFoundError: No module named 'qs_no_such_library'"), "    import qs_no_such_library"]),
        ("qs_imports_name:mux", [("cannot import 'qs_imports_name': qs_imports_name.py, line 1: "
                                  "ImportError: cannot import name 'qs_no_such_name' from 'os'"),
                                 "    from os import qs_no_such_name"]),
        ("qs_library:mux", [("cannot import 'qs_library': qs_library.py, line 3: JSONDecodeError: Expecting "
                             "property name enclosed in double quotes: line 1 column 2 (char 1)"),
                            "    SETTINGS = json.loads('{not json')"]),  # raised in json: shown where the user called it
    ],
)
def test_worker_target_errors_name_the_problem_and_where(user_modules: Path, target: str, lines: list[str]) -> None:
    """A missing attribute is not 'not a ServeMux'; an exception while importing the user's module
    (SyntaxError, RuntimeError, ImportError) is its file, line and code in two lines, exit 2 (it was
    a click traceback with exit 1)."""
    code, out, err = run("worker", target, "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2, (out, err)
    got = err.splitlines()
    assert len(got) == len(lines) and "Traceback" not in err, err
    assert got[0].startswith("asynqpy: error: " + lines[0]), err
    assert got[1:] == lines[1:], err


def test_worker_module_not_found_says_where_it_looked(user_modules: Path) -> None:
    code, _, err = run("worker", "qs_missing:mux", "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2 and err.count("\n") == 1, err
    assert f"no module named 'qs_missing' in {user_modules}" in err
    assert "run the worker from the directory holding qs_missing.py" in err


def test_worker_with_processes_checks_the_target_before_starting_children(user_modules: Path) -> None:
    """A broken TARGET with --processes 2 fails once, in the supervisor, instead of every child
    failing and being restarted for ever."""
    code, _, err = run("worker", "qs_raises:mux", "--processes", "2", "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2 and "RuntimeError: no DATABASE_URL set" in err, err


# -- enqueue: -q, --json, --at, flag names in errors -----------------------------------------------

def stored_message(url: str, queue: str, id: str) -> Message:
    """The message of a pending or scheduled task as stored (its state's letter, then the message)."""
    data = redis.Redis.from_url(url).hget(queue_keys(queue).tasks, id)
    assert data is not None
    return decode(data[1:])


def test_enqueue_short_queue_flag_json_and_timeout_none(redis_url: str) -> None:
    code, out, err = run("enqueue", "email:deliver", "-q", "low", "--payload", '{"user_id": 7}', "--json",
                         "--retention", "60", "--redis-url", redis_url)
    assert code == 0, err
    info = json.loads(out)  # the TaskInfo, as `task inspect --json` prints it
    assert info["queue"] == "low" and info["state"] == "pending" and info["payload"] == {"user_id": 7}
    assert info["retention"] == 60 and len(info["id"]) == 16
    assert Inspector(redis_url).task_info("low", info["id"]).payload == {"user_id": 7}
    for value in ("none", "0"):
        code, out, err = run("enqueue", "t", "--timeout", value, "--json", "--redis-url", redis_url)
        assert code == 0, err
        assert stored_message(redis_url, "default", json.loads(out)["id"]).timeout_ms == 0  # no limit
    code, out, _ = run("enqueue", "t", "--timeout", "2.5", "--json", "--redis-url", redis_url)
    assert stored_message(redis_url, "default", json.loads(out)["id"]).timeout_ms == 2500


@pytest.fixture
def tokyo() -> Iterator[None]:
    """The process's local time zone is Asia/Tokyo (UTC+9, no daylight saving time)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_enqueue_at_takes_local_time_zones_and_unix_seconds(redis_url: str, tokyo: None) -> None:
    """--at with no zone is local time (the library takes naive datetimes so too); a zone or Z is
    honoured; a number is Unix seconds."""
    in_an_hour = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
    local = in_an_hour.astimezone(timezone(timedelta(hours=9))).replace(tzinfo=None).isoformat()
    cases = {local: in_an_hour,                                               # naive: Tokyo time
             in_an_hour.strftime("%Y-%m-%dT%H:%M:%SZ"): in_an_hour,
             in_an_hour.astimezone(timezone(timedelta(hours=-5))).isoformat(): in_an_hour,
             str(int(in_an_hour.timestamp())): in_an_hour}
    for text, due in cases.items():
        code, out, err = run("enqueue", "t", "--at", text, "--json", "--redis-url", redis_url)
        assert code == 0, (text, err)
        info = json.loads(out)
        assert info["state"] == "scheduled", text
        assert abs(datetime.fromisoformat(info["next_process_at"]) - due) < timedelta(seconds=2), (text, info)
    code, out, _ = run("enqueue", "t", "--at", "2001-01-01T00:00", "--redis-url", redis_url)
    assert code == 0 and ": pending" in out  # a time past runs now


@pytest.mark.parametrize(
    "args, message",
    [
        (["--in", "-5"], "--in must be >= 0"),
        (["--in", "nan"], "--in must be a number of seconds, got nan"),
        (["--at", "999999999999"], "--at must be a time or Unix seconds from 1970 to 9999"),
        (["--at", "60", "--in", "5"], "give --in or --at, not both"),
        (["--max-retry", "-1"], "--max-retry must be an int >= 0"),
        (["--unique", "0.5"], "--unique must be at least 1 second"),
        (["--retention", "-1"], "--retention must be >= 0"),
        (["--task-id", ""], "--task-id must be a non-empty string"),
    ],
)
def test_enqueue_errors_name_the_flags(redis_url: str, args: list[str], message: str) -> None:
    code, _, err = run("enqueue", "t", *args, "--redis-url", redis_url)
    assert code == 2 and err.count("\n") == 1 and err.startswith("asynqpy: error: " + message), err
    for name in ("process_in", "process_at", "max_retry", "task_id", "timedelta", "datetime"):
        assert name not in err
    assert redis.Redis.from_url(redis_url).keys("asynqpy:{*}:t") == []  # nothing stored


@pytest.mark.parametrize("text", ["tomorrow", "2026-13-01", "0001-01-01"])
def test_enqueue_at_refuses_what_is_not_a_time(redis_url: str, text: str) -> None:
    code, _, err = run("enqueue", "t", "--at", text, "--redis-url", redis_url)
    assert code == 2 and "Invalid value for '--at'" in err and "Traceback" not in err, err


# -- the command tree: --version, help for every option, --log-level anywhere ----------------------

def test_version() -> None:
    code, out, _ = run("--version")
    assert code == 0 and out == f"asynqpy {importlib.metadata.version('asynqpy')} (wire protocol 1; reads 1: docs/releases.md)\n"


def every_command(cmd: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in loaded(cmd):
            yield from every_command(sub, (*path, name))


def test_every_option_of_every_command_has_help() -> None:
    missing = [f"asynqpy {' '.join(path)} {'/'.join(p.opts)}"
               for path, cmd in every_command() for p in cmd.get_params(click.Context(cmd))
               if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()]
    assert not missing, missing
    assert len(list(every_command())) > 20
    for path, cmd in every_command():
        assert (cmd.help or "").strip(), path  # and every command says what it does


def test_every_command_takes_log_level_after_it(redis_url: str) -> None:
    root = logging.getLogger()
    level = root.level
    try:
        for path, cmd in every_command():
            if not isinstance(cmd, click.Group):
                assert "--log-level" in [o for p in cmd.params for o in p.opts], path
        code, _, err = run("stats", "--log-level", "debug", "--redis-url", redis_url)
        assert code == 0, err
        assert root.level == logging.DEBUG
        code, _, err = run("--log-level", "WARNING", "queue", "ls", "--redis-url", redis_url)
        assert code == 0 and root.level == logging.WARNING
        code, _, err = run("stats", "--log-level", "loud", "--redis-url", redis_url)
        assert code == 2 and "Invalid value for '--log-level'" in err
    finally:
        root.setLevel(level)


def test_queue_flag_is_q_everywhere() -> None:
    """Every option naming a queue (or the queues a worker serves) is also -q."""
    seen = 0
    for path, cmd in every_command():
        for p in cmd.params:
            if isinstance(p, click.Option) and p.name in ("queue", "queues_spec"):
                assert "-q" in p.opts, (path, p.opts)
                seen += 1
    assert seen >= 11


# -- worker options -------------------------------------------------------------------------------

@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> list[Server]:
    """The Servers `asynqpy worker` makes; run() returns at once."""
    made: list[Server] = []
    monkeypatch.setattr(Server, "run", lambda self, mux, **kw: made.append(self))
    monkeypatch.setattr(sys, "path", list(sys.path))
    return made


@pytest.mark.parametrize("value, expected", [(None, 1800.0), ("60", 60.0), ("0.5", 0.5), ("0", None),
                                             ("none", None), ("None", None)])
def test_worker_default_timeout(servers: list[Server], value: str | None, expected: float | None) -> None:
    args = ["worker", "workers:mux", "-q", "a=2,b", "--redis-url", "redis://127.0.0.1:1/0"]
    code, out, err = run(*args, *(["--default-timeout", value] if value is not None else []))
    assert code == 0, (out, err)
    [server] = servers
    assert server.options.default_timeout == expected and dict(server.options.queues) == {"a": 2, "b": 1}


@pytest.mark.parametrize("value", ["-1", "soon", "inf"])
def test_worker_default_timeout_refuses_nonsense(servers: list[Server], value: str) -> None:
    code, _, err = run("worker", "workers:mux", "--default-timeout", value, "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2 and "Invalid value for '--default-timeout'" in err and not servers


def test_worker_fail_fast(servers: list[Server]) -> None:
    """--fail-fast: exit when Redis cannot be reached at start instead of waiting for it (the
    library's ServerOptions.fail_fast)."""
    if "fail_fast" not in {f.name for f in dataclasses.fields(ServerOptions)}:
        pytest.skip("this asynqpy has no ServerOptions.fail_fast yet")
    for args, expected in (([], False), (["--fail-fast"], True)):
        code, out, err = run("worker", "workers:mux", *args, "--redis-url", "redis://127.0.0.1:1/0")
        assert code == 0, (out, err)
        assert servers.pop().options.fail_fast is expected  # type: ignore[attr-defined]


def test_the_worker_path_imports_only_what_serving_needs() -> None:
    """`asynqpy worker` starts sooner for not importing the inspection commands, rich, the
    Inspector or the typed-task App (bench/start.py measures the start; this guards the imports)."""
    code = (
        "import sys; from asynqpy.cli.main import main, load_mux; import asynqpy.server; "
        "from asynqpy import ServeMux, Server, Task; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'rich' or m in "
        "('asynqpy.inspector', 'asynqpy.app', 'asynqpy.client', 'asynqpy.cli.dash', 'asynqpy.cli.queue', "
        "'asynqpy.cli.task')); print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.real
def test_worker_on_uvloop(redis_url: str, tmp_path: Path) -> None:
    """`asynqpy worker --loop uvloop` serves tasks on uvloop (the uvloop extra); without uvloop
    installed the flag is a one-line error (exit 2); Server.run refuses an unknown loop."""
    from helpers import start_worker

    (tmp_path / "looped.py").write_text(
        "import asyncio\nfrom asynqpy import ServeMux, Task\nmux = ServeMux()\n"
        "@mux.handle('which')\nasync def which(task: Task) -> str:\n"
        "    return type(asyncio.get_running_loop()).__module__\n")
    w = start_worker(redis_url, "looped:mux", "--loop", "uvloop", env={"PYTHONPATH": str(tmp_path)})
    try:
        with Client(redis_url) as c:
            assert c.call("which", timeout=20).startswith("uvloop")
    finally:
        w.terminate()
        w.wait(20)
    (tmp_path / "uvloop.py").write_text("raise ImportError('not installed')\n")  # uvloop missing
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "asynqpy.cli.main", "worker", "looped:mux", "--loop", "uvloop",
                          "--redis-url", redis_url], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert out.returncode == 2 and out.stderr.strip() == \
        "asynqpy: error: --loop uvloop needs uvloop: pip install '.[uvloop]' in asynqpy's repository", out.stderr
    with pytest.raises(InvalidArgumentError, match="loop must be one of asyncio, uvloop"):
        Server(redis_url).run(ServeMux(), loop="trio")


@pytest.mark.parametrize("args", [
    ["keys", "rotate", "--encryption-keys", "\x00"],
    ["task", "ls", "-q", "default", "--encryption-keys", "keys\x00.json"],
    ["enqueue", "t", "--signing-key-file", "\x00"],
    ["web", "--auth-file", "\x00"],
    ["worker", "mod:mux", "--offload-dir", "\x00"],
])
def test_a_file_option_holding_a_nul_byte_is_a_usage_error(args: list[str]) -> None:
    """click's Path checks stat the path and let a ValueError out (exit 1, a traceback: found by
    test_fuzz on `keys rotate --encryption-keys '\\x00'`): every file option of the CLI is refused
    with one line and exit 2 (cli/common.py SafePath), nothing run."""
    res = CliRunner().invoke(main, [*args, "--redis-url", "redis://127.0.0.1:1/0"])
    assert res.exit_code == 2, (res.output, repr(res.exception))
    assert "NUL byte" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("args", [
    ["task", "ls", "--encryption-keys", "\ud800"],
    ["enqueue", "t", "--signing-key-file", "keys-\udfff.txt"],
])
def test_a_file_option_the_file_systems_encoding_cannot_write_is_a_usage_error(args: list[str]) -> None:
    """A lone surrogate in a path made click's stat raise UnicodeEncodeError (exit 1: found by
    test_fuzz on `task ls --encryption-keys '\ud800'`): refused with exit 2 (SafePath), nothing run."""
    res = CliRunner().invoke(main, [*args, "--redis-url", "redis://127.0.0.1:1/0"])
    assert res.exit_code == 2, (res.output, repr(res.exception))
    assert "cannot write it" in res.output and "Traceback" not in res.output
