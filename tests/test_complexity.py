"""No function or method in ``asynqpy/`` and ``cli/`` is more complex than :data:`MAX_COMPLEXITY`,
by McCabe's cyclomatic complexity as radon measures it (``radon cc -s -n C asynqpy cli`` prints
every block above 10 with its score). The bound held first for the core, the sans-I/O layer every
transition goes through, where a branchy function is where a path forgets a thread (issue 30);
then for every layer and the CLI (issue 43: a branchy function there hid the same kind of
forgotten path, and a reader could not find the steps)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from radon import complexity as radon_complexity
from radon import visitors as radon_visitors

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "asynqpy" / "core"
MEASURED = ("asynqpy", "cli")
"""The folders held to the bound, each with every module under it."""
LAYERS = ("asynqpy/core", "asynqpy/redisio", "asynqpy/worker", "asynqpy/web", "asynqpy/contrib", "cli")
MAX_COMPLEXITY = 15


def _modules() -> list[Path]:
    """Every module of :data:`MEASURED`."""
    return sorted(path for folder in MEASURED for path in (ROOT / folder).rglob("*.py"))


def _functions(blocks: list[Any]) -> Iterator[Any]:
    """Every function among radon's blocks, the functions nested in them included (radon counts
    a nested function apart from the one around it); classes left out (their score is their
    methods', which are blocks of their own)."""
    for block in blocks:
        if isinstance(block, radon_visitors.Function):
            yield block
            yield from _functions(block.closures)


@functools.cache  # (the tests below score the same modules; once per process)
def _scores(source: str) -> tuple[tuple[str, int, int], ...]:
    """(name, line, cyclomatic complexity) of every function and method of a module's source."""
    return tuple((f.fullname, f.lineno, f.complexity) for f in _functions(radon_complexity.cc_visit(source)))


def _branchy(name: str, branches: int, indent: str = "") -> str:
    body = "".join(f"{indent}    if x == {i}:\n{indent}        return {i}\n" for i in range(branches))
    return f"{indent}def {name}(x):\n{body}{indent}    return -1\n"


def test_the_measure_sees_functions_methods_and_nested_functions() -> None:
    source = (_branchy("flat", 15) + "\nclass K:\n" + _branchy("method", 16, "    ") +
              "\ndef outer():\n" + _branchy("inner", 20, "    ") + "    return inner\n")
    scores = {name: cc for name, _, cc in _scores(source)}
    assert scores["flat"] == 16 and scores["K.method"] == 17 and scores["inner"] == 21 and scores["outer"] == 1


def test_core_modules_are_measured() -> None:
    modules = sorted(CORE.rglob("*.py"))
    assert len(modules) > 10
    assert sum(len(_scores(m.read_text(encoding="utf-8"))) for m in modules) > 100


def test_every_layer_and_the_cli_are_measured() -> None:
    modules = _modules()
    for layer in LAYERS:
        inside = [m for m in modules if m.is_relative_to(ROOT / layer)]
        assert len(inside) >= 3, layer
        assert sum(len(_scores(m.read_text(encoding="utf-8"))) for m in inside) > 10, layer
    facades = [m for m in modules if m.parent == ROOT / "asynqpy"]
    assert {"client.py", "inspector.py", "server.py", "testing.py", "app.py"} <= {m.name for m in facades}
    assert ROOT / "asynqpy" / "contrib" / "outbox" / "relay.py" in modules  # the outbox, beside the integrations


def test_no_function_over_max_complexity() -> None:
    over = [f"{path.relative_to(ROOT)}:{line} {name} ({cc})"
            for path in _modules()
            for name, line, cc in _scores(path.read_text(encoding="utf-8")) if cc > MAX_COMPLEXITY]
    assert not over, (f"{len(over)} function(s) in asynqpy/ and cli/ over cyclomatic complexity {MAX_COMPLEXITY} "
                      "(radon): split each into well-named steps\n" + "\n".join(over))


SPINE_FILES = ("asynqpy/worker/settings.py", "asynqpy/server.py", "cli/main.py", "scripts/settings_table.py")
"""Outside the core, the files of the settings table and the loop registry (issue 43 item 3): the
server's validation, ``Server.arun`` and the ``asynqpy worker`` command were 40, 42 and 48."""


def test_no_function_of_the_settings_and_loops_over_max_complexity() -> None:
    over = [f"{rel}:{line} {name} ({cc})" for rel in SPINE_FILES
            for name, line, cc in _scores((ROOT / rel).read_text(encoding="utf-8")) if cc > MAX_COMPLEXITY]
    assert not over, (f"{len(over)} function(s) over cyclomatic complexity {MAX_COMPLEXITY} (radon): split each "
                      "into well-named steps\n" + "\n".join(over))


WORKER = ROOT / "asynqpy" / "worker"
PROCESSOR_MAX_LINES = 450
"""``worker/processor.py`` keeps fetch → run → finish readable top-down; the fetch half (batched
dequeues, wake tokens, the idle wait) lives in ``worker/fetcher.py`` (issue 43: perf work had grown
it to 660 lines)."""


def test_the_processor_stays_short() -> None:
    lines = len((WORKER / "processor.py").read_text(encoding="utf-8").splitlines())
    assert lines <= PROCESSOR_MAX_LINES, (f"asynqpy/worker/processor.py has {lines} lines (at most "
                                          f"{PROCESSOR_MAX_LINES}): keep the fetching in worker/fetcher.py")


MAX_MODULE_LINES = 600
"""No module of ``asynqpy/`` or ``cli/`` over this many lines (issue 44 #3): a longer one is
several concerns in one file; split it by concern (``core/`` shows how: docs/internals-layout.md)."""
TOO_LONG_FOR_NOW: dict[str, str] = {}
"""Modules still over :data:`MAX_MODULE_LINES`, each with the reason and the work that ends it."""


def test_no_module_over_max_lines() -> None:
    long = {rel: n for path in _modules()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
            and (rel := path.relative_to(ROOT).as_posix()) not in TOO_LONG_FOR_NOW}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {long}"


def test_the_exceptions_are_still_needed() -> None:
    """An exception whose file got short (or went away) is removed from the list."""
    gone = [rel for rel in TOO_LONG_FOR_NOW if not (ROOT / rel).exists()
            or len((ROOT / rel).read_text(encoding="utf-8").splitlines()) <= MAX_MODULE_LINES]
    assert gone == []
