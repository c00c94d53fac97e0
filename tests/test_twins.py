"""Client/AsyncClient and Inspector/AsyncInspector are twins written once (asynqpy.core.spine.twin): the
same public methods with the same signatures and docstrings, the async ones coroutine functions
(async generator functions where the sync one is a generator); and a plan runs the same way under
both drivers, an exception a step raised thrown into the plan at its ``yield``."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from asynqpy import AsyncClient, AsyncInspector, Client, Inspector
from asynqpy.core.spine.twin import Async, Steps, Sync, planned

TWINS = [(Client, AsyncClient), (Inspector, AsyncInspector)]
ROOT = Path(__file__).resolve().parent.parent
PAIRS = [("asynqpy/client.py", "Client", "AsyncClient"), ("asynqpy/inspector.py", "Inspector", "AsyncInspector"),
         ("asynqpy/core/spine/twin.py", "Sync", "Async")]
MAX_MIRRORED = 60
"""Issue 30 item 6: at most this many lines written twice, once per twin."""


def _public(cls: type) -> dict[str, Any]:
    return {name: getattr(cls, name) for name in dir(cls) if not name.startswith("_")}


def _answer(annotation: Any) -> str:
    """A return annotation with the async iterator read as its sync twin."""
    return re.sub(r"\bAsyncIterator\b", "Iterator", str(annotation))


def differences(sync: type, aio: type) -> list[str]:
    """What keeps ``aio`` from being ``sync``'s twin (empty: nothing)."""
    s, a = _public(sync), _public(aio)
    out = [f"{name}: only in {cls.__name__}" for name, cls in
           [(n, sync) for n in s.keys() - a.keys()] + [(n, aio) for n in a.keys() - s.keys()]]
    for name in sorted(s.keys() & a.keys()):
        f, g = s[name], a[name]
        if not callable(f):
            if callable(g):
                out.append(f"{name}: an attribute in {sync.__name__}, callable in {aio.__name__}")
            continue
        if inspect.isgeneratorfunction(f):
            if not inspect.isasyncgenfunction(g):
                out.append(f"{name}: a generator in {sync.__name__}, not an async generator in {aio.__name__}")
        elif inspect.iscoroutinefunction(f) or not inspect.iscoroutinefunction(g):
            out.append(f"{name}: not a plain function in {sync.__name__} and a coroutine function in {aio.__name__}")
        fs, gs = inspect.signature(f), inspect.signature(g)
        if fs.parameters != gs.parameters:
            out.append(f"{name}: parameters {fs} in {sync.__name__}, {gs} in {aio.__name__}")
        if _answer(fs.return_annotation) != _answer(gs.return_annotation):
            out.append(f"{name}: returns {fs.return_annotation} in {sync.__name__}, {gs.return_annotation} "
                       f"in {aio.__name__}")
        if not f.__doc__ or not g.__doc__:
            out.append(f"{name}: no docstring")
    return out


@pytest.mark.parametrize(("sync", "aio"), TWINS, ids=lambda c: c.__name__)
def test_the_twins_have_the_same_methods_and_signatures(sync: type, aio: type) -> None:
    assert differences(sync, aio) == []
    assert len(_public(sync)) > 10  # the comparison saw the surface


@pytest.mark.parametrize("cls", [c for pair in TWINS for c in pair], ids=lambda c: c.__name__)
def test_a_method_made_from_a_plan_shows_its_answer_not_the_plan(cls: type) -> None:
    for name, f in _public(cls).items():
        if callable(f):
            assert not re.match(r"(Steps|Plan)\[", str(inspect.signature(f).return_annotation)), name
            assert f.__qualname__ == f"{cls.__name__}.{name}", name


def test_a_difference_is_caught() -> None:
    class Base:
        def both(self, x: int, y: str = "a") -> int:
            """doc"""
            return x

        def listing(self) -> Any:
            """doc"""
            yield 1

    class Aio:
        async def both(self, x: int, y: str = "b") -> int:  # another default
            """doc"""
            return x

        def listing(self) -> Any:  # not an async generator
            """doc"""
            yield 1

        async def extra(self) -> None:
            """doc"""

    found = differences(Base, Aio)
    assert any(d.startswith("both: parameters") for d in found)
    assert any(d.startswith("listing: a generator") for d in found)
    assert "extra: only in Aio" in found


class _Surface:
    """A planned surface driven by fake steps: a step ``n`` (an int) answers ``n * 2``; a step
    "boom" raises."""

    @planned
    def total(self, *numbers: int, catch: bool = False) -> Steps[int]:
        """Add the doubles of ``numbers``."""
        got = 0
        for n in numbers:
            got += yield n
        try:
            yield "boom"
        except KeyError:
            if not catch:
                raise
            got += 1000
        return got

    @planned
    def twice(self, n: int) -> Steps[int]:
        """:meth:`total` of ``n`` and ``n``, as a sub-plan."""
        return (yield from _Surface.total.plan(self, n, n, catch=True))


class _SyncSurface(_Surface, Sync):
    def _step(self, step: Any) -> Any:
        if step == "boom":
            raise KeyError(step)
        return step * 2


class _AsyncSurface(_Surface, Async):
    async def _step(self, step: Any) -> Any:
        await asyncio.sleep(0)
        if step == "boom":
            raise KeyError(step)
        return step * 2


def test_a_plan_runs_alike_in_both_drivers() -> None:
    s, a = _SyncSurface(), _AsyncSurface()
    assert s.total(1, 2, catch=True) == 1006 == asyncio.run(a.total(1, 2, catch=True))
    assert s.twice(5) == 1020 == asyncio.run(a.twice(5))
    with pytest.raises(KeyError):
        s.total(1)
    with pytest.raises(KeyError):
        asyncio.run(a.total(1))
    assert inspect.iscoroutinefunction(_AsyncSurface.total) and not inspect.iscoroutinefunction(_SyncSurface.total)
    assert str(inspect.signature(_SyncSurface.total)) == "(self, *numbers: 'int', catch: 'bool' = False) -> 'int'"
    assert _SyncSurface.total.__doc__ == _AsyncSurface.total.__doc__ == "Add the doubles of ``numbers``."
    assert _AsyncSurface.total.__qualname__ == "_AsyncSurface.total"
    assert differences(_SyncSurface, _AsyncSurface) == []


def _code(source: str, cls: str) -> list[str]:
    """The lines of code of class (or function) ``cls`` (no blank line, comment, docstring or lone bracket), with
    ``async``/``await`` and the async names read as their sync twins'."""
    lines = source.split("\n")
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == cls:
            docs = {i for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and ast.get_docstring(n) for i in range(n.body[0].lineno, (n.body[0].end_lineno or 0) + 1)}
            out = []
            for i in range(node.lineno + 1, (node.end_lineno or 0) + 1):
                t = lines[i - 1].strip()
                if not t or t.startswith("#") or i in docs or re.fullmatch(r"[)\]}:,]*", t):
                    continue
                t = re.sub(r"\basync |\bawait ", "", t)
                t = re.sub(r"\b(?:arun_plan|aclose|__aenter__|__aexit__)\b",
                           lambda m: {"arun_plan": "run_plan", "aclose": "close", "__aenter__": "__enter__",
                                      "__aexit__": "__exit__"}[m.group(0)], t)
                out.append(re.sub(r"\bAsync(\w+)", r"Sync\1", re.sub(r"\bAsync(Inspector|Client)\b", r"\1", t)))
            return out
    return []


def mirrored(root: Path = ROOT) -> dict[str, list[str]]:
    """Per twin pair, the lines of the async class that also stand in the sync class."""
    out = {}
    for path, sync, aio in PAIRS:
        if (root / path).exists():
            source = (root / path).read_text()
            twice = set(_code(source, sync))
            out[f"{sync}/{aio}"] = [t for t in _code(source, aio) if t in twice]
    return out


def test_few_lines_are_written_twice() -> None:
    found = mirrored()
    assert set(found) == {"Client/AsyncClient", "Inspector/AsyncInspector", "Sync/Async"}
    assert sum(len(v) for v in found.values()) <= MAX_MIRRORED, found


def test_the_mirror_count_sees_a_mirrored_method() -> None:
    source = """
class A:
    def f(self) -> int:
        \"\"\"doc\"\"\"
        x = run_plan(self.e, p)
        return x

class AsyncA:
    async def f(self) -> int:
        \"\"\"other doc\"\"\"
        x = await arun_plan(self.e, p)
        return x + 1
"""
    twice = set(_code(source, "A"))
    assert [t for t in _code(source, "AsyncA") if t in twice] == ["def f(self) -> int:", "x = run_plan(self.e, p)"]


REDISIO = ROOT / "asynqpy" / "redisio"
REDISIO_MAX_MIRRORED = 30
"""Issue 44 item 5: the Redis I/O layer's sync/async pairs are written once (the executors' plans,
the inboxes' shared core): at most this many lines stand in both twins of a pair, all of them the
drivers' own I/O (which step is which call, the ``try`` around a connection), none of them logic."""


def twin_pairs(source: str) -> list[tuple[str, str]]:
    """The sync/async pairs of a module, by name: classes ``SyncX``/``AsyncX`` or ``X``/``AsyncX``,
    functions ``x``/``ax`` (the async one a coroutine function)."""
    defs = {n.name: n for n in ast.parse(source).body if isinstance(n, (ast.ClassDef, ast.FunctionDef,
                                                                       ast.AsyncFunctionDef))}
    pairs = []
    for name, node in defs.items():
        if isinstance(node, ast.ClassDef) and name.startswith("Async"):
            pairs += [(sync, name) for sync in (f"Sync{name[5:]}", name[5:]) if isinstance(defs.get(sync), ast.ClassDef)]
        elif isinstance(node, ast.AsyncFunctionDef) and isinstance(defs.get(name[1:]), ast.FunctionDef):
            pairs.append((name[1:], name))
    return pairs


def mirrored_in(folder: Path) -> dict[str, list[str]]:
    """Per sync/async pair of the modules of ``folder``, the lines written in both."""
    out = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text()
        for sync, aio in twin_pairs(source):
            twice = set(_code(source, sync))
            out[f"{path.name}:{sync}/{aio}"] = [t for t in _code(source, aio) if t in twice]
    return out


def test_redisio_has_no_hand_mirrored_twins() -> None:
    found = mirrored_in(REDISIO)
    assert {"executor.py:SyncExecutor/AsyncExecutor", "inbox.py:SyncInbox/AsyncInbox",
            "executor.py:run_plan/arun_plan"} <= set(found)  # the pairs are seen
    assert sum(len(v) for v in found.values()) <= REDISIO_MAX_MIRRORED, found


def test_a_new_hand_mirror_in_redisio_is_caught(tmp_path: Path) -> None:
    body = "".join(f"        x{i} = self.step({i}, x{i - 1} if {i} else None)\n" for i in range(REDISIO_MAX_MIRRORED))
    (tmp_path / "probe.py").write_text(
        f"class Probe:\n    def get(self):\n{body}\n\nclass AsyncProbe:\n    async def get(self):\n"
        f"{body.replace('self.step', 'await self.step')}\n\n"
        "def fetch(r):\n    return r.get('k') or r.get('j')\n\nasync def afetch(r):\n"
        "    return await r.get('k') or await r.get('j')\n")
    found = mirrored_in(tmp_path)
    assert set(found) == {"probe.py:Probe/AsyncProbe", "probe.py:fetch/afetch"}
    assert sum(len(v) for v in found.values()) > REDISIO_MAX_MIRRORED


if __name__ == "__main__":  # python tests/test_twins.py [ROOT]: the mirrored lines of each twin pair
    counts = mirrored(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    for pair, lines in counts.items():
        print(f"{pair}: {len(lines)} mirrored lines")
    print(f"total: {sum(len(v) for v in counts.values())} (at most {MAX_MIRRORED})")
    redisio = mirrored_in(REDISIO)
    for pair, lines in redisio.items():
        print(f"redisio/{pair}: {len(lines)} mirrored lines")
    print(f"redisio total: {sum(len(v) for v in redisio.values())} (at most {REDISIO_MAX_MIRRORED})")
