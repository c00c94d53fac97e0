"""App: typed task functions (enqueue checked against the signature at run time, and by mypy),
current_task(), lifecycle hooks and per-process state, asynqpy worker module:app."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from asynqpy import App, InvalidArgumentError, TaskState, current_task

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_accepts_right_calls_and_rejects_wrong_ones() -> None:
    sample = ROOT / "tests" / "typing" / "task_functions.py"
    # mypy's cache of the lint (scripts/lint: ASYNQPY_MYPY_CACHE, which CI keeps outside the fresh
    # clone) holds asynqpy's modules already checked: only the sample is checked here, not asynqpy
    # again cold (~10 s of CPU); mypy compares the sources' hashes, so a changed module is checked
    cache = os.environ.get("ASYNQPY_MYPY_CACHE")
    res = subprocess.run([sys.executable, "-m", "mypy", "--strict", *(["--cache-dir", cache] if cache else []),
                          str(sample)], capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    reported = {int(m[1]) for m in re.finditer(r"task_functions\.py:(\d+): error", res.stdout)}
    marked = {i for i, line in enumerate(sample.read_text().splitlines(), 1) if "# error" in line}
    assert reported == marked, res.stdout


def make_app(backend: Any, **kw: Any) -> App:
    return App(backend.sync, **kw)


def test_task_functions_enqueue_checked_calls_and_run_through_drain(backend: Any) -> None:
    from asynqpy.testing import DrainError, drain

    app = App(backend.sync)
    seen: list[Any] = []

    @app.task(queue="typed", max_retry=2)
    async def add(a: int, b: int = 1, *more: int, **named: int) -> int:
        t = current_task()
        seen.append((t.type, t.retry_count, t.headers))
        return a + b + sum(more) + sum(named.values())

    @app.task(name="flaky")
    def flaky(n: int) -> int:  # a plain def: current_task() works in its thread too
        if current_task().retry_count < 1:
            raise RuntimeError("first try fails")
        return n

    @app.task
    def broken(x: str) -> None:
        raise ValueError(f"bad {x}")

    @app.task
    def loose(x: Any) -> None: ...

    assert add.name == "test_app.test_task_functions_enqueue_checked_calls_and_run_through_drain.<locals>.add"
    assert flaky.__wrapped__ is not None and broken.name.endswith(".broken")
    info = add.enqueue(1, 2, 3, x=4)
    assert info.payload == {"a": 1, "b": 2, "more": [3], "named": {"x": 4}} and info.queue == "typed"
    add.using(headers={"tenant": "t1"}).enqueue(5)
    later = add.enqueue_in(3600, 10)
    assert later.state is TaskState.SCHEDULED
    flaky.enqueue(7)
    for bad_args, bad_kwargs in (((), {}), (("x", 1, 2), {"b": 3})):
        with pytest.raises(InvalidArgumentError, match="task test_app"):
            add.enqueue(*bad_args, **bad_kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not msgpack-serializable"):
        loose.enqueue(object())
    with pytest.raises(InvalidArgumentError, match="did you mean 'max_retry'"):
        app.task(retries=3)
    report = drain(app, backend.new_async(), queues=["typed", "default"])  # the scheduled one too: the clock jumps
    assert report.processed == 5 and report.failed == []  # add x3, flaky twice
    assert sorted(seen, key=str) == sorted([(add.name, 0, {}), (add.name, 0, {"tenant": "t1"}), (add.name, 0, {})],
                                           key=str)
    broken.enqueue("input")
    with pytest.raises(DrainError) as exc:
        drain(app, backend.new_async(), queues=["default"])
    assert "ValueError: bad input" in str(exc.value) and "Traceback" in str(exc.value)
    with pytest.raises(InvalidArgumentError, match="no task is running"):
        current_task()


def test_arguments_are_checked_against_their_annotations_at_enqueue(backend: Any) -> None:
    """The README's quickstart promised that deliver_email.enqueue("42") (user_id: int) is refused
    at enqueue; it was accepted, and the handler ran with a str. Every enqueue path checks the
    annotations it can (int, float, bool, str, bytes, None, list/tuple/dict and their items,
    Optional/unions), naming the argument; nothing is written."""
    from asynqpy import Inspector
    from asynqpy.workflows import chain

    app = App(backend.sync)

    @app.task
    async def deliver_email(user_id: int) -> None: ...

    @app.task
    def report(ratio: float, label: Optional[str], rows: list[int], by: dict[str, int] | None = None,  # noqa: UP045
               *tags: str, flag: bool = False, extra: Any = None, **named: bytes) -> None: ...

    refused: list[tuple[Any, str]] = [
        (lambda: deliver_email.enqueue("42"), "argument 'user_id' must be int, got str '42'"),  # type: ignore[arg-type]
        (lambda: deliver_email.enqueue(True), "argument 'user_id' must be int, got bool True"),
        (lambda: deliver_email.enqueue(4.0), "'user_id' must be int, got float"),  # type: ignore[arg-type]
        (lambda: deliver_email.enqueue_in(60, "42"), "'user_id' must be int"),  # type: ignore[arg-type]
        (lambda: deliver_email.s("42"), "'user_id' must be int"),  # type: ignore[arg-type]
        (lambda: app.periodic(deliver_email, every=60, args=("42",)), "'user_id' must be int"),
        (lambda: report.enqueue("1", None, []), "'ratio' must be float, got str"),  # type: ignore[arg-type]
        (lambda: report.enqueue(1, 2, []), "'label' must be str | None, got int"),  # type: ignore[arg-type]
        (lambda: report.enqueue(1, None, [1, "2"]), "'rows' must be list[int], got list"),  # type: ignore[list-item]
        (lambda: report.enqueue(1, None, [], {"a": "b"}), "'by' must be dict[str, int] | None"),  # type: ignore[dict-item]
        (lambda: report.enqueue(1, None, [], None, "t", 2), "'tags' (item 1) must be str, got int"),  # type: ignore[arg-type]
        (lambda: report.enqueue(1, None, [], flag=1), "'flag' must be bool, got int"),  # type: ignore[arg-type]
        (lambda: report.enqueue(1, None, [], z="s"), "'z' (in 'named') must be bytes, got str"),  # type: ignore[arg-type]
    ]
    for call, message in refused:
        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            call()
    with pytest.raises(InvalidArgumentError, match="'user_id' must be int"):
        chain(deliver_email.s(1), deliver_email.s("x"))  # type: ignore[arg-type]
    assert backend.sync.keys("asynqpy:{default}:*") == [] and backend.sync.keys("asynqpy:{critical}:*") == []
    ok = report.enqueue(1, None, (1, 2), {"a": 1}, "t", flag=True, extra=object.__name__, z=b"x")  # int for float,
    assert Inspector(backend.sync).task_info("default", ok.id).payload["rows"] == [1, 2]  # a tuple for a list
    deliver_email.enqueue(42)


def test_call_with_timeout_points_to_call_within(backend: Any) -> None:
    """``task.call(x, timeout=10)`` bound timeout=10 to the function's arguments ("unexpected
    keyword argument"): it now says to use call_within (or using(timeout=) for the attempt's)."""
    app = App(backend.sync)

    @app.task
    def double(x: int) -> int:
        return 2 * x

    for call in (lambda: double.call(21, timeout=10), lambda: asyncio.run(double.acall(21, timeout=10))):
        with pytest.raises(InvalidArgumentError, match=r"call_within\(10, \.\.\.\)"):
            call()  # type: ignore[call-arg]
    assert backend.sync.keys("*") == []


def test_call_returns_a_typed_result(backend: Any) -> None:
    app = App(backend.sync)

    @app.task
    async def double(x: int) -> int:
        return 2 * x

    async def main() -> None:
        app.redis = backend.new_async()
        server = app.server(shutdown_timeout=1)
        running = asyncio.create_task(server.arun(app.mux))
        try:
            assert await double.acall(21) == 42
            assert (await double.aenqueue(1)).type == double.name
            assert (await double.aenqueue_in(60, 2)).state is TaskState.SCHEDULED
            assert (await double.aenqueue_at(4_000_000_000, 3)).state is TaskState.SCHEDULED
        finally:
            server.stop()
            await running
            await app.aclose()

    asyncio.run(main())


def test_lifecycle_hooks_and_state(redis_url: str) -> None:
    app = App(redis_url)
    order: list[str] = []

    @app.on_startup
    async def open_pool(state: Any) -> None:
        state.pool = "a pool"
        order.append("start")

    @app.on_shutdown
    def close_pool(state: Any) -> None:
        order.append(f"stop {state.pool}")

    @app.task
    async def use_pool() -> str:
        order.append("task")
        return str(app.state.pool)

    async def main() -> None:
        server = app.server(shutdown_timeout=1)
        running = asyncio.create_task(server.arun(app.mux))
        assert await use_pool.acall() == "a pool"
        server.stop()
        await running
        await app.aclose()

    asyncio.run(main())
    assert order == ["start", "task", "stop a pool"]


def test_a_failing_startup_hook_stops_the_worker_before_any_task(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "hooked.py").write_text(
        "from asynqpy import App\n"
        f"app = App({redis_url!r})\n"
        "@app.task\n"
        "def job() -> None:\n"
        "    pass\n"
        "@app.on_startup\n"
        "def connect(state):\n"
        "    raise RuntimeError('database unreachable')\n")
    client = App(redis_url).client()
    client.enqueue("hooked.job", {}, queue="default")
    res = subprocess.run([sys.executable, "-m", "asynqpy.cli.main", "worker", "hooked:app"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines()[-1] == \
        "asynqpy: error: on_startup hook connect failed: RuntimeError: database unreachable"
    assert stats_of(redis_url).pending == 1  # nothing was taken


def stats_of(url: str) -> Any:
    from asynqpy import Inspector

    with Inspector(url) as insp:
        return insp.queue_info("default")


def test_worker_serves_an_app(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "typed.py").write_text(
        "from asynqpy import App\n"
        f"app = App({redis_url!r}, default_queue='typed-q')\n"
        "@app.task\n"
        "async def greet(name: str) -> str:\n"
        "    return 'hello ' + name\n")
    from helpers import start_worker, wait_sync

    w = start_worker(redis_url, "typed:app", env={"PYTHONPATH": str(tmp_path)})
    try:
        sys.path.insert(0, str(tmp_path))
        import typed  # type: ignore[import-not-found]

        assert typed.greet.call_within(20, "you") == "hello you"  # the App's queue, served without --queues
    finally:
        sys.path.remove(str(tmp_path))
        w.terminate()
        w.wait(20)
    wait_sync(lambda: True)


pytest_plugins = ["pytester"]


def test_the_pytest_plugin_as_a_user_would_use_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(tasks='''
from asynqpy import App

app = App()

@app.task
def add(a: int, b: int) -> int:
    return a + b

@app.task
def fails() -> None:
    raise RuntimeError("boom")
''')
    pytester.makepyfile(test_user='''
import pytest
from asynqpy.testing import DrainError
from tasks import add, app, fails

def test_add_runs(asynqpy_url, asynqpy_drain):
    app.redis = asynqpy_url
    info = add.enqueue(2, 3)
    add.enqueue_in(3600, 1, 1)             # scheduled: drain jumps the clock to it
    report = asynqpy_drain(app)
    assert report.processed == 2 and not report.failed

def test_failures_show_their_traceback(asynqpy_url, asynqpy_drain):
    app.redis = asynqpy_url
    app._client = None
    fails.enqueue()
    with pytest.raises(DrainError, match="RuntimeError: boom"):
        asynqpy_drain(app)

def test_client_fixture(asynqpy_client):
    assert asynqpy_client.enqueue("t").queue == "default"
''')
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_the_readmes_testing_example_passes_as_written(pytester: pytest.Pytester) -> None:
    """The README's quickstart tasks.py and docs/testing.md's tests/test_tasks.py, pasted into a project."""
    blocks: dict[str, str] = {}
    for page in (ROOT / "README.md", ROOT / "docs" / "testing.md"):
        blocks.update(re.findall(r"```python\n# ([\w/]+\.py)\n(.*?)```", page.read_text(), re.DOTALL))
    pytester.makepyfile(tasks=blocks["tasks.py"])
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_tasks.py").write_text(blocks["tests/test_tasks.py"])
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "tests")
    result.assert_outcomes(passed=2)


def test_memory_urls_everywhere_in_one_process() -> None:
    """Client, Inspector, Server and the CLI on memory:// share one store per name (in-process)."""
    from click.testing import CliRunner

    from asynqpy import Client, Inspector
    from asynqpy.cli.main import main

    url = "memory://shared-by-name"
    with Client(url) as c:
        c.enqueue("t", 1, queue="mem")
    runner = CliRunner()
    res = runner.invoke(main, ["enqueue", "t", "--queue", "mem", "--redis-url", url])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["queue", "inspect", "mem", "--json", "--redis-url", url])
    assert res.exit_code == 0 and '"pending": 2' in res.output, res.output
    with Inspector(url) as insp:
        assert insp.queue_info("mem").pending == 2
    with Client("memory://another-store") as other:
        assert other.enqueue("t", queue="mem").queue == "mem"
    with Inspector(url) as insp:
        assert insp.queue_info("mem").pending == 2  # another name, another store


def test_drain_runs_a_workflows_children_too(backend: Any) -> None:
    """drain waits for the ends of parents on their way to their children (the outbox), not only
    for pending and active tasks: a chain's and a fan-in's children run before it returns (it
    returned with them waiting)."""
    from asynqpy import chain, group
    from asynqpy.testing import drain

    app = App(backend.sync)
    seen: list[int] = []

    @app.task
    def add(a: int, b: int) -> int:
        seen.append(a + b)
        return a + b

    @app.task
    def total() -> int:
        results = current_task().parent_results
        seen.append(sum(results))
        return sum(results)

    chain(add.s(1, 2), group(add.s(3, 4), add.s(5, 6)).then(total.s())).enqueue(app.client())
    report = drain(app, backend.new_async())
    assert sorted(seen) == [3, 7, 11, 18] and report.processed == 4
