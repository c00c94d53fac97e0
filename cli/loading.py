"""Loading the user's ServeMux or App for ``asynqpy worker module:attribute``: the import, and
what a failure says (the file and line of the user's code that raised, one or two lines).

Part of the CLI (``cli/main.py`` re-exports :func:`load_mux` and :func:`import_failure`).
"""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, cast

from asynqpy.core.handlers.mux import ServeMux

from .common import UserError

if TYPE_CHECKING:
    from asynqpy import App


# -- loading the user's ServeMux --------------------------------------------------------------

_IMPORT_MACHINERY = (str(Path(importlib.__file__).parent), str(Path(__file__)))
"""Frames in these files are the import machinery's (and this module's), not the user's code."""


def _shown_path(filename: str) -> str:
    """A path relative to the current directory when it lies inside it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_LIBRARIES = tuple(sorted({str(Path(p).resolve()) + os.sep for k, p in sysconfig.get_paths().items()
                            if k in ("stdlib", "platstdlib", "purelib", "platlib")}))
"""The standard library's and installed packages' directories: an error raised in there is shown
at the line of the user's code that called into it."""


def _user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc``'s traceback in the user's own code: not in the import
    machinery, and not in the standard library or an installed package when the user's code called
    it (else the innermost frame there)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and not f.filename.startswith(_IMPORT_MACHINERY)]
    own = [f for f in frames if not str(Path(f.filename).resolve()).startswith(_LIBRARIES)]
    chosen = own or frames
    return chosen[-1] if chosen else None


def import_failure(module_name: str, exc: BaseException) -> str:
    """Why importing ``module_name`` failed, in a line or two: the module not found at all, or the
    error raised while running it, with the file and line it came from (and that line's code on a
    second line), as Python's traceback would end."""
    what = f"{type(exc).__name__}: {_one_line(str(exc))}" if str(exc) else type(exc).__name__
    head = f"cannot import {module_name!r}: "
    if isinstance(exc, SyntaxError):
        where = _shown_path(exc.filename) if exc.filename else "?"
        return head + f"{where}, line {exc.lineno}: {type(exc).__name__}: {exc.msg}" + _code(exc.text)
    frame = _user_frame(exc)
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if frame is None and missing and (module_name == missing or module_name.startswith(missing + ".")):
        return head + (f"no module named {missing!r} in {os.getcwd()} or on sys.path; run the worker from the "
                       f"directory holding {module_name.replace('.', '/')}.py (or its package), or add that "
                       "directory to PYTHONPATH")
    if frame is None:
        return head + what
    inside = f" (in {frame.name})" if frame.name != "<module>" else ""
    return head + f"{_shown_path(frame.filename)}, line {frame.lineno}{inside}: {what}" + _code(frame.line)


def _code(line: str | None) -> str:
    """The offending line of code on a line of its own (nothing when unknown)."""
    return f"\n    {_one_line(line, 120)}" if line and line.strip() else ""


def _did_you_mean(module_name: str, muxes: list[str]) -> str:
    """'; did you mean 'tasks:mux'?' for the module's ServeMux objects (nothing if none)."""
    if not muxes:
        return ""
    return "; did you mean " + " or ".join(repr(f"{module_name}:{m}") for m in muxes) + "?"


def _kind(obj: object) -> str:
    """'a function', 'a class', 'a module', 'a Server object', 'None'..."""
    if obj is None:
        return "None"
    if isinstance(obj, type):
        return "a class"
    if type(obj).__name__ == "module":
        return "a module"
    if callable(obj) and hasattr(obj, "__code__"):
        return "a function"
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name} object"


def load_mux(target: str) -> ServeMux | App:
    """Import 'package.module:attribute' and return the ServeMux or App it names (modules are
    looked up in the current directory first). A module that cannot be imported, a missing
    attribute or one that is neither is a UserError saying which, with the file and line of an
    error."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise UserError(f"expected module:attribute, got {target!r}")
    if module_name.startswith("."):
        raise UserError(f"cannot import {module_name!r}: give an absolute module name")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the user's module raises is reported
        raise UserError(import_failure(module_name, exc)) from None
    file = getattr(module, "__file__", None)
    where = f" ({_shown_path(file)})" if file else ""
    if not hasattr(module, attr):
        muxes = sorted(name for name, value in vars(module).items() if isinstance(value, ServeMux))
        hint = _did_you_mean(module_name, muxes)
        raise UserError(f"module {module_name!r}{where} has no attribute {attr!r}{hint}")
    mux = getattr(module, attr)
    apps = sys.modules.get("asynqpy.app")  # an App exists only if the user's module imported it
    if apps is not None and isinstance(mux, apps.App):
        return cast("App", mux)
    if not isinstance(mux, ServeMux):
        muxes = sorted(name for name, value in vars(module).items() if isinstance(value, ServeMux))
        hint = _did_you_mean(module_name, muxes)
        raise UserError(f"{target!r} is {_kind(mux)}, not a ServeMux{hint}")
    return mux
