"""A script of ``lua/`` as a Redis Functions library (Redis 7.0+: ``FUNCTION LOAD`` once per server,
``FCALL`` per call), built by the loader (:mod:`.scripts`) next to the script's EVAL source.

Why: Lua makes a closure of every ``local function`` of a script at each EVALSHA (the includes'
helpers, ~70 for an enqueue), and that was ~40 % of Redis's instructions per call
(docs/internals-per-task.md). A library's top-level code runs once, when it is loaded: its
helpers are made then, and a call runs only the script's body.

The library of a script is the script's flattened text cut in two at its first line of code of
its own (after the header and the includes that open it, which hold definitions):

- library level: ``local K, A, G`` (the named inputs: ``K`` and ``A`` made once, their fields set
  at each call; ``G`` made at each call), the message fields ``F``,
  and the includes' definitions (their constants and functions, which read ``K`` / ``A`` as
  upvalues: a call sets them before anything runs, and Redis runs one call at a time);
- the function ``asynqpy_<script>_<version>`` (registered with the ``allow-oom`` flag for the
  scripts that must run while Redis is full, :data:`RUN_WHEN_FULL`): the prologue's ``K``, ``A``,
  ``G`` and tails from its keys and arguments, the library-level state a helper changes set back
  to its first value (:func:`_resets`: ``EV_CONF``, includes/events), then the body (the script's
  own code and the includes that are blocks of it: the dequeue's stages).

The version is the first 16 hex digits of the SHA-1 of the library's text: a changed script is a
new library, so servers running two versions of asynqpy (a rolling upgrade) each find their own.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

BODY_MARK = "--@@body@@\n"
"""The line the loader puts at a script's first line of code of its own (a comment: the EVAL
source is the text without it)."""

RUN_WHEN_FULL = frozenset({
    "aggregate", "archive", "archive_tasks", "cancel", "complete", "cron_pause", "cron_remove", "delete_tasks",
    "dequeue", "done", "done_dequeue", "drop", "drop_queue", "expire", "expired", "extend", "flow_read",
    "forget_gone", "forward", "page", "pause", "proc_commit", "proc_read", "reconcile", "requeue", "retry", "rewake",
    "rules_dead", "rules_redrive", "run_end", "run_tasks", "search", "snooze", "stats", "sweep", "tenant_fix",
    "tenants", "trim", "ungroup", "unpause", "wake_take"})
"""Scripts whose function carries ``allow-oom``: what a worker or an operator needs while Redis is
full (tests/test_full_redis.py DRAIN). Redis refuses a function without it whole when Redis is
full, where it refuses an EVAL script at its first write that may grow memory
(docs/internals-scripts.md): the scripts that store (STORE, OPTIONAL there) are refused whole both
ways, and these start with a removal, so they ran as EVAL scripts and run so as functions."""

_TOP_LOCAL = re.compile(r"^local ([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)(?:\s*=\s*(.*))?$", re.MULTILINE)
_LOCAL_FUNCTION = re.compile(r"^local function ([A-Za-z_]\w*)\(.*?^end[ \t]*(?:--[^\n]*)?\n", re.MULTILINE | re.DOTALL)


class LibraryError(RuntimeError):
    """A script cannot be made a library (its definitions keep state this module cannot set back)."""


def function_name(script: str, version: str) -> str:
    return f"asynqpy_{script}_{version}"


_ASSIGNED = re.compile(r"(?m)^[ \t]+(?:local[ \t]+)?([A-Za-z_]\w*)\s*(?:\[[^\n]*?\]|\.\w+)?\s*=(?!=)")
_TABLE_CHANGED = re.compile(r"table\.(?:insert|remove|sort)\(\s*([A-Za-z_]\w*)\b")


def _mutated(functions: str) -> set[str]:
    """The names a helper assigns, or one of whose fields it assigns (a library-level local holding
    state when it is one): one pass over the helpers' text for all names (a search per name took
    0.8 s of the 1.45 s of CPU that loading the 69 scripts took)."""
    return {*_ASSIGNED.findall(functions), *_TABLE_CHANGED.findall(functions)}


def _resets(script: str, defs: str) -> list[str]:
    """Statements setting the library-level locals a helper changes back to their first value, at
    the start of each call (one call's state never reaches the next)."""
    functions = "".join(m.group(0) for m in _LOCAL_FUNCTION.finditer(defs))
    outside = _LOCAL_FUNCTION.sub("", defs)
    out, mutated = [], _mutated(functions)
    for m in _TOP_LOCAL.finditer(outside):
        for name in (n.strip() for n in m.group(1).split(",")):
            if name not in mutated:
                continue
            value = (m.group(2) or "nil").split("--")[0].strip()
            whole = value.count("{") == value.count("}") and not value.endswith(("{", ",", "("))
            if "," in m.group(1) or not value or not whole:
                raise LibraryError(f"{script}.lua: the library-level local {name} is changed by a helper and "
                                   "its value is not one line of its own (set it back at each call by hand)")
            out.append(f"{name} = {value}")
    return out


_WORD = re.compile(r"[A-Za-z_]\w*")


def _reads(function: str) -> set[str]:
    """The words of a function's text past its name, less its parameters (a parameter shadows a
    body local of its name in the whole function)."""
    params, _, rest = function.partition(")")
    return set(_WORD.findall(rest)) - set(_WORD.findall(params))


def hoist(defs: str, body: str) -> tuple[str, str]:
    """``defs`` and ``body`` with the body's top-level ``local function`` definitions that read none
    of the body's own locals (nor a body function left in place) moved to the end of ``defs``: made
    once at load, not at every call (the dequeue's stages define the plain and the fair take's
    helpers in the body). Any word of a definition but its parameters counts as a read, its
    comments too: a definition kept in place is always safe."""
    blocks = list(_LOCAL_FUNCTION.finditer(body))
    outside = _LOCAL_FUNCTION.sub("", body)
    own = {n.strip() for m in _TOP_LOCAL.finditer(outside) for n in m.group(1).split(",")}
    words = [_reads(m.group(0)[len("local function " + m.group(1)):]) for m in blocks]
    kept = {m.group(1) for m in blocks}
    moved: set[str] = set()
    changed = True
    while changed:  # a definition moves once every body function it reads has moved
        changed = False
        for m, used in zip(blocks, words):
            name = m.group(1)
            if name not in moved and not used & (own | (kept - {name})):
                moved.add(name)
                kept.discard(name)
                changed = True
    out, pos, lifted = [], 0, []
    for m in blocks:
        if m.group(1) in moved:
            out.append(body[pos:m.start()])
            lifted.append(m.group(0))
            pos = m.end()
    out.append(body[pos:])
    return defs.rstrip("\n") + "\n" + "".join(lifted), "".join(out)


def library(script: str, header: str, prologue: str, defs: str, body: str) -> tuple[str, str]:
    """The library text and function name of ``script``, from its header comment, its prologue (as
    :func:`~asynqpy.core.spine.scripts.prologue` emits it), its definitions and its body (the
    flattened text cut at :data:`BODY_MARK`)."""
    lib_level: list[str] = []
    per_call: list[str] = []
    for line in prologue.splitlines():
        if line.startswith("local F = "):
            lib_level.append(line)
        elif line.startswith(("local K = {", "local A = {")):
            per_call.extend(_fields(line))
        elif line.startswith("local G = "):
            per_call.append(line[len("local "):])
        else:
            per_call.append(line)
    defs, body = hoist(defs, body)
    flags = "{'allow-oom'}" if script in RUN_WHEN_FULL else "{}"
    text = "\n".join([
        "#!lua name=@NAME@", header, "local K, A, G = {}, {}, nil", *lib_level, defs.strip("\n"),
        "redis.register_function{function_name = '@NAME@', flags = " + flags + ", callback = function(KEYS, ARGV)",
        *per_call, *_resets(script, defs), body.strip("\n"), "end}", ""])
    name = function_name(script, hashlib.sha1(text.encode()).hexdigest()[:16])
    return text.replace("@NAME@", name), name


_FIELD = re.compile(r"([A-Za-z_]\w*) = ((?:KEYS|ARGV)\[\d+\])")


def _fields(line: str) -> list[str]:
    """The prologue's ``local K = {tasks = KEYS[1], ...}`` as assignments to the library's own
    ``K`` (or ``A``), made once at load: each call sets every field its header names (a table
    made at every call, and collected, cost ~5 000 of an FCALL's instructions for 18 keys)."""
    table = line[len("local "):line.index(" = ")]
    fields = _FIELD.findall(line)
    if len(fields) != line.count(" = ") - 1:
        raise LibraryError(f"a prologue line that is not a table of KEYS / ARGV: {line!r}")
    return [f"{table}.{name} = {value}" for name, value in fields]


def split(text: str) -> str:
    """``text`` (a script's file, its header first) with :data:`BODY_MARK` at its first line of code
    of its own: past its header, the blank lines, comments and includes that open it."""
    lines: Sequence[str] = text.splitlines(keepends=True)
    at = 0
    in_header = text.startswith("--[[")
    for i, line in enumerate(lines):
        if in_header:
            in_header = "]]" not in line
            continue
        s = line.strip()
        if s and not s.startswith("--"):
            at = i
            break
    else:
        at = len(lines)
    return "".join(lines[:at]) + BODY_MARK + "".join(lines[at:])
