"""One source for a sync class and its asyncio twin (Client/AsyncClient, Inspector/AsyncInspector).

A public method is written once, as a *plan* decorated with :class:`planned`: a generator that
yields the steps of its I/O (a broker call, one round trip's calls, a wait: the facade says which
steps it knows) and returns its answer. A class deriving :class:`Sync` gets, in place of each
planned method, a plain method that runs the plan's steps and returns the answer; a class deriving
:class:`Async`, a coroutine function that awaits each step. Both have the plan's name, signature
(its return annotation ``Steps[X]`` read as ``X``) and docstring; for mypy, the descriptor's
``__get__`` types the method per class (``-> X`` or ``-> Coroutine[..., X]``).

An exception a step raises is thrown into the plan at its ``yield``: a plan handles it as the
straight-line code it stands for would. Within a plan, another planned method runs as a sub-plan:
``yield from Surface.method.plan(self, ...)``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
T = TypeVar("T")
Steps = Generator[Any, Any, T]
"""A plan: yields steps, is sent each step's reply, returns its answer."""

_STEPS = re.compile(r"^(?:Steps|Plan)\[(.*)\]$")


class planned(Generic[P, T]):
    """A public method written once as a plan (see the module's docstring)."""

    def __init__(self, plan: Callable[Concatenate[Any, P], Steps[T]]) -> None:
        self.plan = plan
        self.__doc__ = plan.__doc__

    @overload
    def __get__(self, obj: Async, owner: Any) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, obj: Sync, owner: Any) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: None, owner: Any) -> planned[P, T]: ...
    @overload
    def __get__(self, obj: object, owner: Any) -> Callable[P, Steps[T]]: ...

    def __get__(self, obj: Any, owner: Any) -> Any:
        # reached on the class itself, or on a class that is neither Sync nor Async: the plan
        return self if obj is None else self.plan.__get__(obj, owner)


def _install(cls: type, is_async: bool) -> None:
    """Put a driving method in ``cls`` for each planned method it inherits."""
    for name in dir(cls):
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, planned):
            setattr(cls, name, _method(cls, name, attr, is_async))


def _method(cls: type, name: str, spec: planned[..., Any], is_async: bool) -> Callable[..., Any]:
    plan = spec.plan
    method: Callable[..., Any]
    if is_async:
        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await self._drive(self._answer(plan(self, *args, **kwargs)))
    else:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return self._drive(self._answer(plan(self, *args, **kwargs)))
    sig = inspect.signature(plan)
    params = list(sig.parameters.values())  # (``self, /`` where a plan takes **options: for mypy)
    params[0] = params[0].replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
    answer = sig.return_annotation
    if isinstance(answer, str) and (m := _STEPS.match(answer)):
        answer = m.group(1)
    method.__name__, method.__qualname__, method.__module__ = name, f"{cls.__qualname__}.{name}", cls.__module__
    method.__doc__ = spec.__doc__  # the plan's, or the one set on the class
    setattr(method, "__signature__", sig.replace(parameters=params, return_annotation=answer))  # noqa: B010
    method.__annotations__ = {**plan.__annotations__, "return": answer}
    return method


class _Twin:
    _is_async = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _install(cls, cls._is_async)

    def _step(self, step: Any) -> Any:
        """The reply to one step of a plan, raising what the step raised; in an Async class, an
        awaitable of it."""
        raise NotImplementedError

    def _answer(self, plan: Steps[T]) -> Steps[T]:
        """The plan a public method runs: ``plan`` itself, or a class's wrapping of it (the
        Inspector decrypts what it answers: core/security/keyplans.py)."""
        return plan


class Sync(_Twin):
    """Base of a class whose planned methods run their plans to the end and return the answer."""

    def _drive(self, plan: Steps[T]) -> T:
        reply: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = plan.send(reply) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                reply, error = self._step(step), None
            except BaseException as exc:  # noqa: BLE001 - thrown into the plan at its yield
                reply, error = None, exc


class Async(_Twin):
    """Base of a class whose planned methods are coroutine functions awaiting each step."""

    _is_async = True

    async def _drive(self, plan: Steps[T]) -> T:
        reply: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = plan.send(reply) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                reply, error = await self._step(step), None
            except BaseException as exc:  # noqa: BLE001 - thrown into the plan at its yield
                reply, error = None, exc
