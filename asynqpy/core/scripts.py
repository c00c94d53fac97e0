"""The Lua scripts in ``lua/`` and their named inputs.

Each script ``lua/<verb>-<numkeys>.lua`` opens with a ``--[[ ... ]]`` header that names its inputs,
one declaration a line, in order::

    KEYS[1] tasks        tasks hash              (a key: its name, two or more spaces, what it is)
    KEYS[2] lease        lease zset
                         (an indented line goes on describing the one above)
    KEYS[3..] extra      a sequence: every key from KEYS[3] on (a variadic tail, optional, last)
    ARGV[1] id           (an argument; its description may be left out)
    ARGV[2..] items      a sequence: every argument from ARGV[2] on

The loader resolves ``--- @include "name"`` lines from ``lua/includes``, reads each header into a
:class:`Script` (its key names, argument names and tails) and checks it against the file name and
the body: fixed keys numbered 1..N with N the file name's count, no gaps, every name a distinct
Python identifier (keys and arguments share one namespace), and no literal ``KEYS[n]`` /
``ARGV[n]`` in the code that the header does not name. A header that fails is a load-time error.

:func:`bind` turns named inputs into the positional KEYS and ARGV a script is run with; the broker
builds every script call through it, so a missing or unexpected name fails when the call is built.
"""

from __future__ import annotations

import hashlib
import keyword
import operator
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"\s*$', re.MULTILINE)
_DOC_LINE = re.compile(r"^\s*--(?!- @include ).*\n", re.MULTILINE)
_NAME = re.compile(r"^([a-z_]+)-(\d+)\.lua$")
_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.DOTALL)
_DECL_START = re.compile(r"^(KEYS|ARGV)\[")
_DECL = re.compile(r"^(KEYS|ARGV)\[(\d+)(\.\.)?\] ([A-Za-z_]\w*)(?:\s{2,}\S.*)?\s*$")
_REF = re.compile(r"\b(KEYS|ARGV)\[(\d+)\]")
_COMMENT = re.compile(r"--\[(=*)\[.*?\]\1\]|--[^\n]*", re.DOTALL)


class ScriptHeaderError(RuntimeError):
    """A script's header does not follow the grammar or does not match its file name or body."""


@dataclass(frozen=True)
class Script:
    """One loaded script: its name, KEYS count (the fixed keys, as in its file name), flattened
    source and SHA-1, and its inputs by name (``keys_tail`` / ``args_tail``: the name of the
    variadic tail taking a sequence, '' = none)."""

    name: str
    numkeys: int
    source: str
    sha: str
    keys: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    keys_tail: str = ""
    args_tail: str = ""
    names: frozenset[str] = field(default=frozenset(), compare=False)
    """Every name a call of this script must give."""
    pick_keys: Callable[[Mapping[str, Any]], tuple[Any, ...]] = field(default=lambda d: (), compare=False,
                                                                       repr=False)
    pick_args: Callable[[Mapping[str, Any]], tuple[Any, ...]] = field(default=lambda d: (), compare=False,
                                                                       repr=False)


def bind(name: str, named: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The positional (KEYS, ARGV) of a call of script ``name`` given its inputs by name (a tail
    as a sequence). Raises TypeError naming the script and the names when one is missing or
    unexpected."""
    s = load_scripts()[name]
    try:  # as many names as the header's, each of them found: exactly its names
        if len(named) != len(s.names):
            raise KeyError
        keys, args = s.pick_keys(named), s.pick_args(named)
    except KeyError:
        missing = sorted(s.names - named.keys())
        extra = sorted(named.keys() - s.names)
        raise TypeError(f"script {name!r}: missing {missing}, unexpected {extra} (its header names "
                        f"keys {list(s.keys)}{' + ' + s.keys_tail + '...' if s.keys_tail else ''}, "
                        f"args {list(s.args)}{' + ' + s.args_tail + '...' if s.args_tail else ''})") from None
    if s.keys_tail:
        keys += tuple(_seq(name, s.keys_tail, named[s.keys_tail]))
    if s.args_tail:
        args += tuple(_seq(name, s.args_tail, named[s.args_tail]))
    return keys, args


def _picker(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function returning the values of ``names`` of a mapping, as a tuple, in order."""
    if not names:
        return lambda d: ()
    if len(names) == 1:
        only = names[0]
        return lambda d: (d[only],)
    return operator.itemgetter(*names)


def _seq(script: str, name: str, v: Any) -> Sequence[Any]:
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
        raise TypeError(f"script {script!r}: {name} is a variadic tail, give a sequence, got {type(v).__name__}")
    return v


def parse_header(filename: str, text: str) -> tuple[str, int, tuple[str, ...], tuple[str, ...], str, str]:
    """(name, numkeys, key names, arg names, keys tail, args tail) of the script ``filename``
    whose text is ``text``; raises :class:`ScriptHeaderError` when its header breaks the grammar
    or disagrees with the file name or the body (includes not resolved: pass the flattened body
    to :func:`check_body`)."""
    m = _NAME.match(filename)
    if not m:
        raise ScriptHeaderError(f"Lua file {filename} is not named <verb>-<numkeys>.lua")
    name, numkeys = m.group(1), int(m.group(2))
    h = _HEADER.match(text)
    if not h:
        raise ScriptHeaderError(f"{filename}: no --[[ ... ]] header at the top")
    decls: dict[str, list[tuple[int, bool, str]]] = {"KEYS": [], "ARGV": []}
    for line in h.group(1).splitlines():
        if not _DECL_START.match(line):
            continue
        d = _DECL.match(line)
        if not d:
            raise ScriptHeaderError(f"{filename}: not a declaration ('KEYS[n] name  description', "
                                    f"'ARGV[n..] name  description'): {line.strip()!r}")
        decls[d.group(1)].append((int(d.group(2)), bool(d.group(3)), d.group(4)))
    fixed: dict[str, tuple[str, ...]] = {}
    tails: dict[str, str] = {}
    seen: set[str] = set()
    for kind, items in decls.items():
        names: list[str] = []
        tail = ""
        for n, variadic, nm in items:
            if tail:
                raise ScriptHeaderError(f"{filename}: {kind}[{n}] {nm} follows the variadic tail {tail}")
            if n != len(names) + 1:
                raise ScriptHeaderError(f"{filename}: {kind}[{n}] {nm} is out of order (expected {kind}"
                                        f"[{len(names) + 1}]): a gap or a repeat")
            if keyword.iskeyword(nm) or nm in seen:
                raise ScriptHeaderError(f"{filename}: {kind}[{n}] {nm}: a name must be unique across KEYS and "
                                        "ARGV and not a Python keyword")
            seen.add(nm)
            if variadic:
                tail = nm
            else:
                names.append(nm)
        fixed[kind], tails[kind] = tuple(names), tail
    if len(fixed["KEYS"]) != numkeys:
        raise ScriptHeaderError(f"{filename}: its header names {len(fixed['KEYS'])} keys, its file name says "
                                f"{numkeys}")
    return name, numkeys, fixed["KEYS"], fixed["ARGV"], tails["KEYS"], tails["ARGV"]


def check_body(filename: str, body: str, keys: int, args: int, keys_tail: bool, args_tail: bool) -> None:
    """Every literal ``KEYS[n]`` / ``ARGV[n]`` in the code (comments skipped) is one the header
    names (or falls in its tail). Keys read through a loop (``KEYS[i]``) are not seen here."""
    code = _COMMENT.sub("", body)
    used: dict[str, set[int]] = {"KEYS": set(), "ARGV": set()}
    for kind, n in _REF.findall(code):
        used[kind].add(int(n))
    for kind, count, tail in (("KEYS", keys, keys_tail), ("ARGV", args, args_tail)):
        beyond = sorted(n for n in used[kind] if n > count or n < 1)
        if beyond and not (tail and min(beyond) > count):
            raise ScriptHeaderError(f"{filename}: uses {kind}[{beyond[0]}], which its header does not name "
                                    f"({count} {kind.lower()}{', and a tail' if tail else ''})")


def _lua_dir() -> Path:
    if os.environ.get("ASYNQPY_LUA_DIR"):  # a copy of lua/ (tests/test_model_mutants.py loads mutants so)
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
        # an include's comment lines stay in its file: Redis keeps (and fakeredis compiles, on every
        # call) the flattened text, and an include's doc block can outweigh its code
        return _flatten(_DOC_LINE.sub("", (includes / f"{name}.lua").read_text()), includes, seen)

    return _INCLUDE.sub(sub, text)


def _load_one(path: Path, root: Path) -> Script:
    """The script in file ``path`` (includes in ``root/includes``), its header checked."""
    text = path.read_text()
    name, numkeys, keys, args, keys_tail, args_tail = parse_header(path.name, text)
    source = _flatten(text, root / "includes", set())
    check_body(path.name, source[_HEADER.match(source).end():],  # type: ignore[union-attr]
               numkeys, len(args), bool(keys_tail), bool(args_tail))
    sha = hashlib.sha1(source.encode()).hexdigest()
    names = frozenset((*keys, *args, *(t for t in (keys_tail, args_tail) if t)))
    return Script(name, numkeys, source, sha, keys, args, keys_tail, args_tail, names, _picker(keys),
                  _picker(args))


def load_dir(root: Path) -> dict[str, Script]:
    """Every script in the directory ``root`` (includes in ``root/includes``), by name; raises
    :class:`ScriptHeaderError` for a header that does not hold (see the module's docstring)."""
    out: dict[str, Script] = {}
    for path in sorted(root.glob("*.lua")):
        script = _load_one(path, root)
        out[script.name] = script
    if not out:
        raise RuntimeError(f"no Lua scripts found in {root}")
    return out


class _Scripts(Mapping[str, Script]):
    """The scripts of ``lua/`` by name, each read (and its header checked) when first asked for: a
    process loads the few it uses (a worker's first task waits on a handful of scripts, not on
    reading and checking all of them). Listing them (iteration, ``len``) loads them all."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._loaded: dict[str, Script] = {}
        self._all = False

    def __getitem__(self, name: str) -> Script:
        script = self._loaded.get(name)
        if script is None:
            if self._all or not isinstance(name, str) or not name:
                raise KeyError(name)
            paths = [p for p in self.root.glob(f"{glob_escape(name)}-*.lua")
                     if (m := _NAME.match(p.name)) is not None and m.group(1) == name]
            if len(paths) != 1:
                raise KeyError(name)
            script = self._loaded.setdefault(name, _load_one(paths[0], self.root))
        return script

    def _every(self) -> dict[str, Script]:
        if not self._all:
            self._loaded = {**load_dir(self.root), **self._loaded}
            self._all = True
        return self._loaded

    def __iter__(self) -> Iterator[str]:
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())


@lru_cache(maxsize=1)
def load_scripts() -> Mapping[str, Script]:
    """Every script in ``lua/``, by name (``enqueue``, ``dequeue``, ...), each loaded on first use."""
    return _Scripts(_lua_dir())
