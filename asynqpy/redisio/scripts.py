"""Loads the Lua scripts in ``lua/``: resolves ``--- @include "name"`` lines from ``lua/includes``,
checks each script's KEYS arity (the ``-N`` in its file name) and computes its SHA-1 for EVALSHA.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"\s*$', re.MULTILINE)
_NAME = re.compile(r"^([a-z_]+)-(\d+)\.lua$")
_KEY_REF = re.compile(r"KEYS\[(\d+)\]")


@dataclass(frozen=True)
class Script:
    """One loaded script: its name, KEYS count, flattened source and SHA-1."""

    name: str
    numkeys: int
    source: str
    sha: str


def _lua_dir() -> Path:
    if os.environ.get("ASYNQPY_LUA_DIR"):  # tests: a copy with a change (tests/test_model_mutants.py)
        return Path(os.environ["ASYNQPY_LUA_DIR"])
    here = Path(__file__).resolve().parent.parent  # the asynqpy package
    for d in (here / "lua", here.parent / "lua"):  # the installed package, then a source checkout
        if d.is_dir():
            return d
    raise RuntimeError(f"asynqpy's Lua scripts are missing (looked in {here / 'lua'} and {here.parent / 'lua'})")


def _flatten(text: str, includes: Path, seen: set[str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return _flatten((includes / f"{name}.lua").read_text(), includes, seen)

    return _INCLUDE.sub(sub, text)


@lru_cache(maxsize=1)
def load_scripts() -> dict[str, Script]:
    """Every script in ``lua/``, by name (``enqueue``, ``dequeue``, ...)."""
    root = _lua_dir()
    out: dict[str, Script] = {}
    for path in sorted(root.glob("*.lua")):
        m = _NAME.match(path.name)
        if not m:
            raise RuntimeError(f"Lua file {path.name} is not named <verb>-<numkeys>.lua")
        name, numkeys = m.group(1), int(m.group(2))
        source = _flatten(path.read_text(), root / "includes", set())
        used = {int(k) for k in _KEY_REF.findall(source)}
        if used and max(used) != numkeys:
            raise RuntimeError(f"{path.name} uses KEYS[{max(used)}] but its name says {numkeys} keys")
        sha = hashlib.sha1(source.encode()).hexdigest()
        out[name] = Script(name, numkeys, source, sha)
    if not out:
        raise RuntimeError(f"no Lua scripts found in {root}")
    return out
