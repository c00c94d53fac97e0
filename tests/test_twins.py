"""Client/AsyncClient and Inspector/AsyncInspector are twins written once (asynqpy.core.twin): the
same public methods with the same signatures and docstrings, the async ones coroutine functions
(async generator functions where the sync one is a generator); and a plan runs the same way under
both drivers, an exception a step raised thrown into the plan at its ``yield``."""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any

import pytest

from asynqpy import AsyncClient, AsyncInspector, Client, Inspector
from asynqpy.core.twin import Async, Steps, Sync, planned

TWINS = [(Client, AsyncClient), (Inspector, AsyncInspector)]


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
