"""The CLI through click's runner against the real redis-server: output, exit codes, error lines."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from asynqpy import Client, Inspector
from asynqpy.cli.main import main, parse_queues
from redisproc import free_port

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
        (["enqueue", "t", "--in", "-5"], "process_in must be >= 0"),
        (["worker", "nomodule", "--queues", "default"], "expected module:attribute"),
        (["worker", "no.such.module:mux"], "cannot import"),
        (["worker", "json:dumps"], "is not a ServeMux"),
        (["worker", "..:mux"], "cannot import"),  # relative names: a TypeError traceback (found by fuzzing)
        (["worker", ".workers:mux"], "cannot import"),
        (["worker", "x:y", "--queues", "a=notanumber"], "bad queue weight"),
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
