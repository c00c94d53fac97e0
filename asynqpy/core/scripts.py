"""The Lua scripts in ``lua/`` and their named inputs.

Each script ``lua/<verb>.lua`` opens with a ``--[[ ... ]]`` header that names its inputs, one
declaration a line; their order in the header is their order in KEYS and ARGV::

    KEY tasks          tasks hash              (a key: its name, two or more spaces, what it is)
    KEY lease          lease zset
                       (an indented line goes on describing the one above)
    KEY extra...       a sequence: every key after the named ones (a variadic tail, optional, last)
    ARG id             (an argument; its description may be left out)
    ARG items...       a sequence: every argument after the named ones

The loader resolves ``--- @include "name"`` lines from ``lua/includes``, reads each header into a
:class:`Script` (its key names, argument names and tails) and emits the script's prologue after the
header: ``local K = {tasks = KEYS[1], ...}`` and ``local A = {id = ARGV[1], ...}``, so the body
reads its inputs by name (``K.tasks``, ``A.now``); a script with a variadic tail (or a loop over a
stride of keys) reaches the positional arrays as ``KV`` / ``AV``. Every name must be distinct
(keys and arguments share one namespace), a Python identifier and not a Lua or Python keyword. The
body may not index ``KEYS`` / ``ARGV`` itself, may not read a ``K.x`` / ``A.x`` its header does not
name, and may not read a literal ``KV[n]`` / ``AV[n]`` that is not in its tail. Message field
numbers come from the codec's field table: the prologue defines ``F`` with the fields the
flattened script reads (``F.priority``), and an unknown field fails at load. A header or body
that fails is a load-time error.

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
from pathlib import Path
from typing import Any

from .codec import FIELD_INDEX

_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"\s*$', re.MULTILINE)
_DOC_LINE = re.compile(r"^\s*--(?!- @include ).*\n", re.MULTILINE)
_NAME = re.compile(r"^([a-z_]+)\.lua$")
_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.DOTALL)
_DECL_START = re.compile(r"^(KEYS?|ARGV?)\b")
_DECL = re.compile(r"^(KEY|ARG) ([A-Za-z_]\w*)(\.\.\.)?(?:\s{2,}\S.*)?\s*$")
_RAW = re.compile(r"\b(KEYS|ARGV)\b")
_NAMED = re.compile(r"(?<![\w.])([KA])\.([A-Za-z_]\w*)")
_FIELD = re.compile(r"(?<![\w.])F\.([A-Za-z_]\w*)")
_POS = re.compile(r"\b(KV|AV)\[(\d+)\]")
_LUA_KEYWORDS = frozenset("and break do else elseif end false for function goto if in local nil not or repeat return "
                          "then true until while".split())
_COMMENT = re.compile(r"--\[(=*)\[.*?\]\1\]|--[^\n]*", re.DOTALL)


class ScriptHeaderError(RuntimeError):
    """A script's header does not follow the grammar or does not match its file name or body."""


@dataclass(frozen=True)
class Script:
    """One loaded script: its name, KEYS count (the fixed keys its header names), source (flattened,
    its prologue emitted) and SHA-1, and its inputs by name (``keys_tail`` / ``args_tail``: the name of the
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


def parse_header(filename: str, text: str) -> tuple[str, tuple[str, ...], tuple[str, ...], str, str]:
    """(name, key names, arg names, keys tail, args tail) of the script ``filename`` whose text is
    ``text``; raises :class:`ScriptHeaderError` when its header breaks the grammar (includes not
    resolved: pass the flattened body to :func:`check_body`)."""
    m = _NAME.match(filename)
    if not m:
        raise ScriptHeaderError(f"Lua file {filename} is not named <verb>.lua (lowercase letters and _)")
    name = m.group(1)
    h = _HEADER.match(text)
    if not h:
        raise ScriptHeaderError(f"{filename}: no --[[ ... ]] header at the top")
    fixed: dict[str, list[str]] = {"KEY": [], "ARG": []}
    tails: dict[str, str] = {"KEY": "", "ARG": ""}
    seen: set[str] = set()
    for line in h.group(1).splitlines():
        if not _DECL_START.match(line):
            continue
        d = _DECL.match(line)
        if not d:
            raise ScriptHeaderError(f"{filename}: not a declaration ('KEY name  description', "
                                    f"'ARG name...  description'): {line.strip()!r}")
        kind, nm, variadic = d.group(1), d.group(2), bool(d.group(3))
        if tails[kind]:
            raise ScriptHeaderError(f"{filename}: {kind} {nm} follows the variadic tail {tails[kind]}")
        if keyword.iskeyword(nm) or nm in _LUA_KEYWORDS or nm in seen:
            raise ScriptHeaderError(f"{filename}: {kind} {nm}: a name must be unique across keys and arguments "
                                    "and not a Python or Lua keyword")
        seen.add(nm)
        if variadic:
            tails[kind] = nm
        else:
            fixed[kind].append(nm)
    return name, tuple(fixed["KEY"]), tuple(fixed["ARG"]), tails["KEY"], tails["ARG"]


def check_body(filename: str, body: str, keys: Sequence[str], args: Sequence[str], keys_tail: bool,
               args_tail: bool) -> None:
    """The code (comments skipped) reads its inputs by name: no ``KEYS`` / ``ARGV`` of its own, every
    ``K.x`` / ``A.x`` one its header names, and the positional ``KV`` / ``AV`` only for a tail
    (never a literal index of a named input)."""
    code = _COMMENT.sub("", body)
    raw = _RAW.search(code)
    if raw:
        raise ScriptHeaderError(f"{filename}: uses {raw.group(1)} itself: read inputs by name (K.x, A.x; KV / AV "
                                "for a variadic tail)")
    named = {"K": set(keys), "A": set(args)}
    for kind, nm in _NAMED.findall(code):
        if nm not in named[kind]:
            raise ScriptHeaderError(f"{filename}: uses {kind}.{nm}, which its header does not name")
    for nm in _FIELD.findall(code):
        if nm not in FIELD_INDEX:
            raise ScriptHeaderError(f"{filename}: uses F.{nm}, which is no message field (core/codec.py FIELD_INDEX)")
    count = {"KV": (len(keys), keys_tail), "AV": (len(args), args_tail)}
    for kind in ("KV", "AV"):
        n, tail = count[kind]
        if re.search(rf"\b{kind}\b", code) and not tail:
            raise ScriptHeaderError(f"{filename}: uses {kind}, but its header names no variadic tail")
    for kind, i in _POS.findall(code):
        if int(i) <= count[kind][0]:
            raise ScriptHeaderError(f"{filename}: uses {kind}[{i}], a named input: use its name")


def prologue(keys: Sequence[str], args: Sequence[str], code: str) -> str:
    """The opening lines the loader puts after a script's header: its named inputs as ``K`` and
    ``A``, the message fields it reads as ``F`` (``F.tenant``: the field's 0-based index, from
    core/codec.py FIELD_INDEX), and the positional arrays as ``KV`` / ``AV`` where the code uses them (a tail)."""
    k = ", ".join(f"{nm} = KEYS[{i}]" for i, nm in enumerate(keys, 1))
    a = ", ".join(f"{nm} = ARGV[{i}]" for i, nm in enumerate(args, 1))
    out = f"local K = {{{k}}}\nlocal A = {{{a}}}\n"
    fields = sorted(set(_FIELD.findall(code)), key=FIELD_INDEX.__getitem__)
    if fields:
        out += "local F = {" + ", ".join(f"{nm} = {FIELD_INDEX[nm]}" for nm in fields) + "}\n"
    for kind, raw in (("KV", "KEYS"), ("AV", "ARGV")):
        if re.search(rf"\b{kind}\b", code):
            out += f"local {kind} = {raw}\n"
    return out


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
    """The script in file ``path`` (includes in ``root/includes``), its header checked and its
    prologue emitted."""
    text = path.read_text()
    name, keys, args, keys_tail, args_tail = parse_header(path.name, text)
    flat = _flatten(text, root / "includes", set())
    end = _HEADER.match(flat).end()  # type: ignore[union-attr]
    body = flat[end:]
    check_body(path.name, body, keys, args, bool(keys_tail), bool(args_tail))
    source = flat[:end] + "\n" + prologue(keys, args, _COMMENT.sub("", body)) + body.lstrip("\n")
    sha = hashlib.sha1(source.encode()).hexdigest()
    names = frozenset((*keys, *args, *(t for t in (keys_tail, args_tail) if t)))
    return Script(name, len(keys), source, sha, keys, args, keys_tail, args_tail, names, _picker(keys),
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
            path = self.root / f"{name}.lua"
            if _NAME.match(path.name) is None or not path.is_file():
                raise KeyError(name)
            script = self._loaded.setdefault(name, _load_one(path, self.root))
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
