"""Checking a task function's arguments against its annotations when it is enqueued (sans-I/O).

A call that mypy would flag (``deliver_email.enqueue("42")`` for ``user_id: int``) is refused at
enqueue with :class:`InvalidArgumentError` naming the argument, rather than failing (or worse,
running with a string) in the worker. Only the annotations whose meaning is plain are checked:

- ``int`` (not ``bool``), ``float`` (an ``int`` too, as for type checkers), ``bool``, ``str``,
  ``bytes``, ``None``;
- ``list``/``list[X]``, ``tuple``/``tuple[X, ...]`` (a list or a tuple: both are stored as a list),
  ``dict``/``dict[K, V]`` (a mapping), with their items checked when ``X``/``K``/``V`` is checked;
- ``Optional[X]``, ``X | Y``, ``Union[...]``: one of them;
- ``Any``, ``object``, and anything else (a class, a TypedDict, ``Literal``, a TypeVar, an
  annotation that cannot be resolved): not checked.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from .errors import InvalidArgumentError

Check = Callable[[Any], bool]
"""Whether a value fits an annotation."""

_SCALARS: dict[Any, Check] = {
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    bool: lambda v: isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    bytes: lambda v: isinstance(v, bytes),
    None: lambda v: v is None,
    type(None): lambda v: v is None,
}
_DICTS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def _is_union(origin: Any) -> bool:
    return origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType)


def _union(args: tuple[Any, ...]) -> Check | None:
    """``X | Y``: one of them (not checked if one of them is not)."""
    members = [checker(a) for a in args]
    if any(m is None for m in members):
        return None
    checks = [m for m in members if m is not None]
    return lambda v: any(c(v) for c in checks)


def _sequence(base: Any, args: tuple[Any, ...]) -> Check:
    """``list``/``tuple`` (either is stored as a list), with their items."""
    if base is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        fixed = [checker(a) for a in args]  # tuple[int, str]: that many items, each its own
        return lambda v: isinstance(v, (list, tuple)) and len(v) == len(fixed) and all(
            c is None or c(x) for c, x in zip(fixed, v))
    item = checker(args[0]) if args else None
    if item is None:
        return lambda v: isinstance(v, (list, tuple))
    each = item
    return lambda v: isinstance(v, (list, tuple)) and all(each(x) for x in v)


def _mapping(args: tuple[Any, ...]) -> Check:
    """A mapping, with its keys and values."""
    key = checker(args[0]) if len(args) == 2 else None
    value = checker(args[1]) if len(args) == 2 else None
    return lambda v: isinstance(v, Mapping) and all(
        (key is None or key(k)) and (value is None or value(x)) for k, x in v.items())


def checker(hint: Any) -> Check | None:
    """A check for values of annotation ``hint``, or None where it is not checked."""
    if hint in _SCALARS:
        return _SCALARS[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_union(origin):
        return _union(args)
    base = hint if origin is None else origin
    if base in (list, tuple):
        return _sequence(base, args)
    if base in _DICTS:
        return _mapping(args)
    return None


def _name(hint: Any) -> str:
    """An annotation as the error shows it (``int``, ``list[str]``, ``int | None``)."""
    if hint is None or hint is type(None):
        return "None"
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return hint.__name__
    if _is_union(typing.get_origin(hint)):
        return " | ".join(_name(a) for a in typing.get_args(hint))
    return str(hint).replace("typing.", "").replace("NoneType", "None")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _each_hint(fn: Callable[..., Any], sig: inspect.Signature) -> dict[str, Any]:
    """The annotations of ``fn``'s parameters that can be resolved, each on its own (a string
    annotation evaluated in the function's module, as :func:`typing.get_type_hints` does)."""
    out: dict[str, Any] = {}
    namespace = getattr(inspect.unwrap(fn), "__globals__", {})
    for pname, param in sig.parameters.items():
        ann = param.annotation
        if ann is inspect.Parameter.empty:
            continue
        if isinstance(ann, str):  # resolved by typing itself, in the function's module, one at a time
            stub = types.FunctionType((lambda: None).__code__, namespace)
            stub.__annotations__ = {pname: ann}
            try:
                ann = typing.get_type_hints(stub)[pname]
            except Exception:  # noqa: BLE001 - a name only a type checker knows: not checked
                continue
        out[pname] = ann
    return out


class ArgumentChecks:
    """The checks of a function's parameters, made once (from :func:`typing.get_type_hints`; a
    function whose annotations cannot be resolved is not checked)."""

    def __init__(self, fn: Callable[..., Any], sig: inspect.Signature) -> None:
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # noqa: BLE001 - a forward reference or a name only a type checker knows:
            hints = _each_hint(fn, sig)  # resolve the parameters one by one, skipping those
        self.checks: dict[str, tuple[Check, str, inspect._ParameterKind]] = {}
        for pname, param in sig.parameters.items():
            if pname not in hints:
                continue
            check = checker(hints[pname])
            if check is not None:
                self.checks[pname] = (check, _name(hints[pname]), param.kind)

    def check(self, task: str, arguments: Mapping[str, Any]) -> None:
        """Raise InvalidArgumentError naming the first argument of ``arguments`` (bound by
        parameter name) that does not fit its annotation."""
        for pname, value in arguments.items():
            found = self.checks.get(pname)
            if found is None:
                continue
            check, shown, kind = found
            if kind is inspect.Parameter.VAR_POSITIONAL:
                items = [(f"{pname!r} (item {i})", v) for i, v in enumerate(value)]
            elif kind is inspect.Parameter.VAR_KEYWORD:
                items = [(f"{k!r} (in {pname!r})", v) for k, v in value.items()]
            else:
                items = [(repr(pname), value)]
            for where, v in items:
                if not check(v):
                    raise InvalidArgumentError(f"task {task}: argument {where} must be {shown}, got "
                                               f"{type(v).__name__} {_shown(v)}")
