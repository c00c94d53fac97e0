"""The Lua scripts in ``lua/`` and their named inputs.

Each script ``lua/<verb>.lua`` opens with a ``--[[ ... ]]`` header that names its inputs, one
declaration a line; their order in the header is their order in KEYS and ARGV::

    KEY tasks          tasks hash              (a key: its name, two or more spaces, what it is)
    KEY lease          lease zset
                       (an indented line goes on describing the one above)
    KEY @exit          a key group of KEY_GROUPS, expanded in place into its keys
    KEY extra...       a sequence: every key after the named ones (a variadic tail, optional, last)
    ARG id             (an argument; its description may be left out)
    ARG items... {id token}   a stride tail: items of two values, read by member

Key groups (:data:`KEY_GROUPS`: ``@pending``, ``@events``, ``@serial``, ``@exit``) are declared
once, here; a header names one and the loader expands it into its keys (``K.pending``,
``K.prio`` ...), and the broker fills it from a QueueKeys with one function per group
(``core.spine.broker.GROUP_KEYS``). A header that spells out every key of a group one by one fails.

The loader resolves ``--- @include "name"`` lines from ``lua/includes``, reads each header into a
:class:`Script` (its key names, argument names and tails) and emits the script's prologue after the
header: ``local K = {tasks = KEYS[1], ...}`` and ``local A = {id = ARGV[1], ...}``, so the body
reads its inputs by name (``K.tasks``, ``A.now``). A tail is a view on KEYS / ARGV (nothing
copied): ``K.extra[i]`` its i-th value, ``K.extra.n`` their count; a stride tail's
``A.items[i].token`` reads a member of its i-th item (``{*}``: the fixed names again, item 0
being the fixed inputs themselves); ``.all()`` unpacks a tail where the body calls it;
``G.pending`` is a declared group's keys as an array in the group's order (includes/priority's
``pk``: a key added to the group reaches it). Every name
must be distinct (keys and arguments share one namespace), a Python identifier and not a Lua or
Python keyword. The body may not use ``KEYS`` / ``ARGV`` (nor the old positional ``KV`` / ``AV``)
itself and may not read a ``K.x`` / ``A.x`` its header does not name. Message field numbers come
from the codec's field table: the prologue defines ``F`` with the fields the flattened script
reads (``F.priority``), and an unknown field fails at load. A header or body that fails is a
load-time error.

:func:`bind` turns named inputs into the positional KEYS and ARGV a script is run with (a stride
tail must be whole items); the broker builds every script call through it, so a missing or
unexpected name fails when the call is built.
"""

from __future__ import annotations

import hashlib
import keyword
import operator
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import msgpack

from ..model.codec import FIELD_INDEX
from . import library as lib

_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"\s*$', re.MULTILINE)
_DOC_LINE = re.compile(r"^\s*--(?!- @include ).*\n", re.MULTILINE)
_NAME = re.compile(r"^([a-z_]+)\.lua$")
_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.DOTALL)
_DECL_START = re.compile(r"^(KEYS?|ARGV?)\b")
_DECL = re.compile(r"^(KEY|ARG) (@?[A-Za-z_]\w*)(\.\.\.)?(?: \{([^}]*)\})?(?:\s{2,}\S.*)?\s*$")
_DOTTED = re.compile(r"[A-Za-z_][\w.]*")
"""A name with the members read from it (``K.pending``, ``redis.call``, ``A.items.n``): one pass of it
over a script's code finds every input, field and group the code reads (one regular expression per
kind, each with a look-behind, took ~0.5 ms a script each, most of a script's build)."""
_WORD = re.compile(r"[A-Za-z_]\w*")
_RAW = frozenset(("KEYS", "ARGV"))
_POSITIONAL = frozenset(("KV", "AV"))
_LUA_KEYWORDS = frozenset("and break do else elseif end false for function goto if in local nil not or repeat return "
                          "then true until while".split())
_COMMENT = re.compile(r"--\[(=*)\[.*?\]\1\]|--[^\n]*", re.DOTALL)
_LOCAL_FUNCTION = re.compile(r"^local function ([A-Za-z_]\w*)\(.*?^end[ \t]*(?:--[^\n]*)?\n", re.MULTILINE | re.DOTALL)


KEY_GROUPS: Mapping[str, tuple[str, ...]] = {
    # the keys holding a queue's pending tasks: the plain list, the prio zset (priorities other than
    # the default), the tenants' zset, ready ring and hash, and the active tenant tasks (a tenant's
    # concurrency); lua/includes/priority ``pk``. Every script that makes a task pending, takes one
    # out of pending or counts them names them all.
    "pending": ("pending", "prio", "tq", "tr", "tn", "ta"),
    # the queue's event stream and its settings hash (field 'events': the stream's cap, 0 = off;
    # includes/events)
    "events": ("events", "conf"),
    # what releases a keyed task's key to its next task (includes/serial): the keyheld hash, the
    # blocked zset, the wake list, and the pending keys the next task is made pending in
    "serial": ("keyheld", "blocked", "wake", "@pending"),
    # what every way a task ends or leaves active shares (includes/exit task_exit): its event, its
    # workflow children told through the outbox (includes/flow), its key released, its offloaded
    # payload's blob recorded for deletion (includes/offload)
    "exit": ("@events", "children", "outbox", "@serial", "blobs"),
}
"""Shared key groups, each declared here once: a header names one as ``KEY @pending`` and the
loader expands it, in place, into its keys (a ``@name`` member expands that group); the broker
fills a group's names from a QueueKeys with one function per group (``core.spine.broker.pending_keys``
...). A header may not spell out every key of a group one by one (the load fails)."""


@cache
def group_keys(name: str) -> tuple[str, ...]:
    """The key names of the group ``name`` (nested groups expanded, in order); KeyError if none."""
    out: list[str] = []
    for m in KEY_GROUPS[name]:
        out.extend(group_keys(m[1:]) if m.startswith("@") else (m,))
    return tuple(out)


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
    keys_stride: tuple[str, ...] = ()
    """The member names of each item of a stride tail (``KEY queues... {tasks lease}``), () = a plain tail."""
    args_stride: tuple[str, ...] = ()
    names: frozenset[str] = field(default=frozenset(), compare=False)
    """Every name a call of this script must give."""
    pick_keys: Callable[[Mapping[str, Any]], tuple[Any, ...]] = field(default=lambda d: (), compare=False,
                                                                       repr=False)
    pick_args: Callable[[Mapping[str, Any]], tuple[Any, ...]] = field(default=lambda d: (), compare=False,
                                                                       repr=False)
    library: str = field(default="", repr=False)
    """The script as a Redis Functions library (:mod:`.library`: loaded once per server, its helpers
    made once), '' = none."""
    function: str = ""
    """The library's function (``asynqpy_<name>_<version>``), called with FCALL."""


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
        keys += tuple(_seq(name, s.keys_tail, named[s.keys_tail], len(s.keys_stride)))
    if s.args_tail:
        args += tuple(_seq(name, s.args_tail, named[s.args_tail], len(s.args_stride)))
    return keys, args


def _picker(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function returning the values of ``names`` of a mapping, as a tuple, in order."""
    if not names:
        return lambda d: ()
    if len(names) == 1:
        only = names[0]
        return lambda d: (d[only],)
    return operator.itemgetter(*names)


def _seq(script: str, name: str, v: Any, width: int) -> Sequence[Any]:
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
        raise TypeError(f"script {script!r}: {name} is a variadic tail, give a sequence, got {type(v).__name__}")
    if width and len(v) % width:
        raise TypeError(f"script {script!r}: {name} is a tail of items of {width}, got {len(v)} values")
    return v


@dataclass(frozen=True)
class Header:
    """A script's header read: its name, fixed key and argument names, and per kind ('KEY',
    'ARG') its tail's name ('' = none) and stride members (() = a plain tail)."""

    name: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    tails: Mapping[str, str]
    strides: Mapping[str, tuple[str, ...]]


def parse_header(filename: str, text: str) -> Header:
    """The :class:`Header` (name, key names, arg names, tails) of the script ``filename`` whose text is
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
    strides: dict[str, tuple[str, ...]] = {"KEY": (), "ARG": ()}
    seen: set[str] = set()
    items: list[set[str]] = []  # the keys each KEY line gives (a group: all its keys)
    for d in _declarations(filename, h.group(1)):
        kind, nm, variadic = d.group(1), d.group(2), bool(d.group(3))
        if tails[kind]:
            raise ScriptHeaderError(f"{filename}: {kind} {nm} follows the variadic tail {tails[kind]}")
        members = _members(filename, kind, nm, variadic)
        items.append(set(members))
        for member in members:
            if keyword.iskeyword(member) or member in _LUA_KEYWORDS or member in seen:
                raise ScriptHeaderError(f"{filename}: {kind} {member}: a name must be unique across keys and "
                                        "arguments (groups expanded) and not a Python or Lua keyword")
            seen.add(member)
        if variadic:
            tails[kind] = nm
            strides[kind] = _stride(filename, kind, nm, d.group(4), fixed[kind])
        elif d.group(4) is not None:
            raise ScriptHeaderError(f"{filename}: {kind} {nm}: only a variadic tail has members ({{a b}})")
        else:
            fixed[kind].extend(members)
    _check_groups(filename, items)
    return Header(name, tuple(fixed["KEY"]), tuple(fixed["ARG"]), tails, strides)


def _declarations(filename: str, header: str) -> Iterator[re.Match[str]]:
    """The KEY / ARG declarations of a header's text, each matched by the grammar (a stride's
    ``{members}`` may go on over indented lines); raises at a line that starts as one and is not."""
    lines = iter(header.splitlines())
    for line in lines:
        if not _DECL_START.match(line):
            continue
        while "{" in line and "}" not in line:
            line = line.rstrip() + " " + next(lines, "}").strip()
        d = _DECL.match(line)
        if not d:
            raise ScriptHeaderError(f"{filename}: not a declaration ('KEY name  description', "
                                    f"'ARG name...  description'): {line.strip()!r}")
        yield d


def _members(filename: str, kind: str, nm: str, variadic: bool) -> tuple[str, ...]:
    """The names a declaration gives: its own, or a group's keys (``KEY @pending``)."""
    if not nm.startswith("@"):
        return (nm,)
    if kind != "KEY" or variadic or nm[1:] not in KEY_GROUPS:
        raise ScriptHeaderError(f"{filename}: {kind} {nm}: a group is a KEY among "
                                f"{sorted('@' + g for g in KEY_GROUPS)} (core/spine/scripts.py KEY_GROUPS)")
    return group_keys(nm[1:])


def _stride(filename: str, kind: str, tail: str, spec: str | None, fixed: Sequence[str]) -> tuple[str, ...]:
    """The member names of a stride tail's items: ``{a b c}`` names them, ``{*}`` repeats the fixed
    names before it (item 0 is then the fixed inputs themselves); None = a plain tail."""
    if spec is None:
        return ()
    members = tuple(fixed) if spec.strip() == "*" else tuple(spec.split())
    if not members or len(set(members)) != len(members) or not all(re.fullmatch(r"[A-Za-z_]\w*", m) and
                                                                    m not in _LUA_KEYWORDS and m not in ("n", "all")
                                                                    for m in members):
        raise ScriptHeaderError(f"{filename}: {kind} {tail}... {{{spec}}}: the members of a stride are distinct "
                                "names (not a Lua keyword, n or all), or * (the fixed names again)")
    return members


def _check_groups(filename: str, items: Sequence[set[str]]) -> None:
    """A group is declared once (KEY_GROUPS) and named: a header whose declarations give every key
    of a group, none of them giving all, spells the group out by hand."""
    every = set().union(*items) if items else set()
    for g in KEY_GROUPS:
        keys = set(group_keys(g))
        if keys <= every and not any(keys <= item for item in items):
            raise ScriptHeaderError(f"{filename}: declares every key of the group @{g} one by one "
                                    f"({' '.join(group_keys(g))}): write KEY @{g}")


def _reads(code: str) -> tuple[set[str], dict[str, set[str]]]:
    """What ``code`` (comments stripped) reads: the words it names (``KEYS``; a member read from a
    table included: ``t.KEYS``), and per table ``K`` / ``A`` / ``F`` / ``G`` the members it reads from
    it (``K.pending``; a table named after a dot, ``t.K.x``, is not one of these)."""
    words: set[str] = set()
    members: dict[str, set[str]] = {"K": set(), "A": set(), "F": set(), "G": set()}
    for token in set(_DOTTED.findall(code)):  # (each name once: a script reads a few hundred, often)
        parts = token.split(".")
        words.update(parts)
        if len(parts) > 1 and parts[0] in members and parts[1][:1].isidentifier():
            members[parts[0]].add(parts[1])
    return words, members


def check_body(filename: str, body: str, keys: Sequence[str], args: Sequence[str]) -> None:
    """The code (comments skipped) reads its inputs by name: no ``KEYS`` / ``ARGV`` (nor the old
    positional ``KV`` / ``AV``) of its own, and every ``K.x`` / ``A.x`` one its header names (a
    tail's name included)."""
    code = _COMMENT.sub("", body)
    words, reads = _reads(code)
    if words & (_RAW | _POSITIONAL):
        raw = re.search(r"\b(KEYS|ARGV)\b", code) or re.search(r"\b(KV|AV)\b", code)  # (the first, in the text)
        raise ScriptHeaderError(f"{filename}: uses {raw.group(1) if raw else '?'} itself: read inputs by name "
                                "(K.x, A.x; a variadic tail K.extra[i], A.items[i].id)")
    named = {"K": set(keys), "A": set(args)}
    for kind in ("K", "A"):
        for nm in sorted(reads[kind] - named[kind]):
            raise ScriptHeaderError(f"{filename}: uses {kind}.{nm}, which its header does not name")
    for nm in sorted(reads["F"]):
        if nm not in FIELD_INDEX:
            raise ScriptHeaderError(f"{filename}: uses F.{nm}, which is no message field (model/codec.py FIELD_INDEX)")
    for nm in sorted(reads["G"]):
        if nm not in KEY_GROUPS or not set(group_keys(nm)) <= named["K"]:
            raise ScriptHeaderError(f"{filename}: uses G.{nm}, which is no key group its header declares")


def prologue(h: Header, code: str) -> str:
    """The opening lines the loader puts after a script's header: its named inputs as ``K`` and
    ``A``, a variadic tail as a view on KEYS / ARGV (nothing copied: ``K.extra[i]`` is the tail's
    i-th value, ``K.extra.n`` their count; a stride tail's ``A.items[i]`` is its i-th item, read by
    member, ``A.items[i].id``, ``A.items.n`` the number of items; ``.all()``, where the code calls
    it, every value unpacked), a key group the code reads as ``G.<group>`` as an array of its keys
    in the group's order (``G.pending``: includes/priority's ``pk``), and the message fields the
    code reads as ``F`` (``F.tenant``: the field's 0-based index, from core/model/codec.py FIELD_INDEX)."""
    tokens = {tuple(t.split(".")[:3]) for t in set(_DOTTED.findall(code)) if "." in t}
    _, reads = _reads(code)
    k = ", ".join(f"{nm} = KEYS[{i}]" for i, nm in enumerate(h.keys, 1))
    a = ", ".join(f"{nm} = ARGV[{i}]" for i, nm in enumerate(h.args, 1))
    out = f"local K = {{{k}}}\nlocal A = {{{a}}}\n"
    for kind, table, raw, fixed in (("KEY", "K", "KEYS", h.keys), ("ARG", "A", "ARGV", h.args)):
        tail, members = h.tails[kind], h.strides[kind]
        if tail:
            target = f"{table}.{tail}"
            out += _tail_view(target, raw, len(fixed), members, table if members == fixed else "",
                              (table, tail, "all") in tokens)
    groups = sorted(reads["G"])
    if groups:  # a group's keys as a Lua array, in the group's order (includes/priority's pk: G.pending)
        out += "local G = {" + ", ".join(
            f"{g} = {{" + ", ".join(f"K.{k}" for k in group_keys(g)) + "}" for g in groups) + "}\n"
    fields = sorted(reads["F"], key=FIELD_INDEX.__getitem__)
    if fields:
        out += "local F = {" + ", ".join(f"{nm} = {FIELD_INDEX[nm]}" for nm in fields) + "}\n"
    return out


def _tail_view(target: str, raw: str, o: int, members: tuple[str, ...], first: str, unpack: bool) -> str:
    """Lua setting ``target`` to a view of ``raw`` past its ``o`` named values (see :func:`prologue`):
    a metatable reads through, so a call pays per value read, not per value sent (no copy)."""
    n = f"#{raw} - {o}" if not members else f"(#{raw} - {o}) / {len(members)}"
    fields = f"n = {n}" + (f", all = function() return unpack({raw}, {o + 1}) end" if unpack else "")
    if not members:
        return f"{target} = setmetatable({{{fields}}}, {{__index = function(_, i) return {raw}[{o} + i] end}})\n"
    w = len(members)
    off = ", ".join(f"{m} = {i}" for i, m in enumerate(members, 1))
    zero = f"if i == 0 then return {first} end " if first else ""
    return (f"do\n  local off = {{{off}}}\n"
            f"  local item = {{__index = function(t, f) return {raw}[t[0] + off[f]] end}}\n"
            f"  {target} = setmetatable({{{fields}}}, {{__index = function(_, i) {zero}"
            f"return setmetatable({{[0] = {o} + (i - 1) * {w}}}, item) end}})\nend\n")


def _lua_dir() -> Path:
    if os.environ.get("ASYNQPY_LUA_DIR"):  # a copy of lua/ (tests/test_model_mutants.py loads mutants so)
        return Path(os.environ["ASYNQPY_LUA_DIR"])
    here = Path(__file__).resolve().parents[2]  # the asynqpy package (this is asynqpy/core/spine/)
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


def shake(code: str) -> str:
    """``code`` without the top-level ``local function`` definitions nothing reaches: a function is
    kept when its name is a word of the code outside every such definition, or of a kept one's
    (comments count: keeping too much is safe). A script names every include it may need, and Lua
    makes a closure of every ``local function`` at each call: the includes of ``enqueue`` defined
    about 90 functions for the dozen it calls, about 40 % of its Redis time (docs/internals-costs.md
    "The producer's path")."""
    blocks = list(_LOCAL_FUNCTION.finditer(code))
    if not blocks:
        return code
    names = [m.group(1) for m in blocks]
    defined = set(names)
    outside, pos = [], 0
    for m in blocks:
        outside.append(code[pos:m.start()])
        pos = m.end()
    outside.append(code[pos:])
    uses: dict[str, set[str]] = {}
    for name, m in zip(names, blocks):
        uses.setdefault(name, set()).update(set(_WORD.findall(code[m.start() + len(name) + 15:m.end()])) & defined)
    todo = set(_WORD.findall("".join(outside))) & defined
    reached: set[str] = set()
    while todo:
        name = todo.pop()
        reached.add(name)
        todo |= uses[name] - reached
    out, pos = [], 0
    for name, m in zip(names, blocks):
        if name not in reached:
            out.append(code[pos:m.start()])
            pos = m.end()
    out.append(code[pos:])
    return "".join(out)


def _load_one(path: Path, root: Path) -> Script:
    """The script in file ``path`` (includes in ``root/includes``), its header checked and its
    prologue emitted: from the build cache (:func:`_cached`) when its inputs are the cached build's."""
    text = path.read_text()
    flat = _flatten(lib.split(text), root / "includes", set())
    where = _cache_file(root, path.name) if _builder() else None
    key = _cache_key(path.name, text, flat) if where is not None else b""
    script = _cached(where, key) if where is not None else None
    if script is None:
        script = _built(path.name, text, flat)
        if where is not None and not sys.dont_write_bytecode:
            _cache(where, key, script)
    return script


_CACHED = ("name", "numkeys", "source", "sha", "keys", "args", "keys_tail", "args_tail", "keys_stride", "args_stride",
           "library", "function")
"""The fields of a :class:`Script` the build cache holds (the rest are made from them: :func:`_script`)."""


@cache
def _builder() -> bytes:
    """What a build depends on besides a script's text: this module's and the library module's code
    and the codec's field numbers (b'' where that code cannot be read as files: nothing is cached)."""
    try:
        h = hashlib.sha1(Path(__file__).read_bytes())
        h.update(Path(lib.__file__).read_bytes())
    except OSError:
        return b""
    h.update(repr(sorted(FIELD_INDEX.items())).encode())
    return h.digest()


def _cache_key(filename: str, text: str, flat: str) -> bytes:
    return hashlib.sha1(_builder() + filename.encode() + b"\0" + text.encode() + b"\0" + flat.encode()).digest()


def _cache_file(root: Path, filename: str) -> Path | None:
    """Where the build of ``root/filename`` is cached: beside Python's bytecode (``__pycache__``
    of the scripts' folder, or under ``sys.pycache_prefix`` as Python puts it); None = nowhere."""
    name = filename.removesuffix(".lua") + ".built"
    if sys.pycache_prefix:
        return Path(sys.pycache_prefix, *root.resolve().parts[1:], name)
    return root / "__pycache__" / name


def _cached(where: Path, key: bytes) -> Script | None:
    """The script built for ``key`` as the cache holds it; None if it holds another build, none, or
    something unreadable (the script is then built: the cache is never trusted over the text)."""
    try:
        got = msgpack.unpackb(where.read_bytes(), use_list=False)
        if got[0] != key:
            return None
        return _script(**dict(zip(_CACHED, got[1:], strict=True)))
    except Exception:  # noqa: BLE001 - a missing, partial or foreign file: build it
        return None


def _cache(where: Path, key: bytes, script: Script) -> None:
    """Write the build of ``script`` for ``key`` (a temporary file, then renamed: a reader never sees
    half of one); a folder that cannot be written leaves it uncached."""
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = where.with_name(f"{where.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(msgpack.packb([key, *(getattr(script, f) for f in _CACHED)]))
        os.replace(tmp, where)
    except OSError:
        pass


def _script(name: str, numkeys: int, source: str, sha: str, keys: tuple[str, ...], args: tuple[str, ...],
            keys_tail: str, args_tail: str, keys_stride: tuple[str, ...], args_stride: tuple[str, ...],
            library: str, function: str) -> Script:
    names = frozenset((*keys, *args, *(t for t in (keys_tail, args_tail) if t)))
    return Script(name, numkeys, source, sha, keys, args, keys_tail, args_tail, keys_stride, args_stride, names,
                  _picker(keys), _picker(args), library, function)


@lru_cache(maxsize=1024)
def _built(filename: str, text: str, flat: str) -> Script:
    """The script of file ``filename`` from its text and its flattened text (:func:`_load_one`):
    built once per process for a text (checking the body, emitting the prologue and the library
    cost ~4-6 ms of CPU a script, ~7-10 ms before one pass of ``_DOTTED`` and a linear ``shake``;
    the mutants' copies of ``lua/``, tests/test_model_mutants.py, differ from ``lua/`` in a file or
    two)."""
    h = parse_header(filename, text)
    keys, args, keys_tail, args_tail = h.keys, h.args, h.tails["KEY"], h.tails["ARG"]
    end = _HEADER.match(flat).end()  # type: ignore[union-attr]
    body = flat[end:]
    check_body(filename, body, (*keys, *(keys_tail and (keys_tail,))), (*args, *(args_tail and (args_tail,))))
    body = shake(body)  # (checked whole: an include's unused function is held to the rules too)
    pro = prologue(h, _COMMENT.sub("", body))
    source = flat[:end] + "\n" + pro + body.replace(lib.BODY_MARK, "", 1).lstrip("\n")
    sha = hashlib.sha1(source.encode()).hexdigest()
    defs, own = body.split(lib.BODY_MARK, 1)
    library, function = lib.library(h.name, flat[:end], pro, defs, own)
    return _script(h.name, len(keys), source, sha, keys, args, keys_tail, args_tail, h.strides["KEY"],
                   h.strides["ARG"], library, function)


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
