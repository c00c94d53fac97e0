"""Every way a task leaves a state goes through one include (issue 30): ``lua/includes/exit.lua``
(``task_exit``) does the bookkeeping each way of leaving owes (its lock, its progress, its event,
the tasks waiting on it, its key, its process, the wake-up of a held-back worker), from one table
of duties (``exit_row``); and only ``lua/includes/stored.lua`` knows the layout of a task's stored
value (state byte, lease token, message).

A script "changes a task's state" when its own text, or an include function it calls, writes or
deletes a field of the tasks hash. Each one calls ``task_exit``, or is listed in ``NO_EXIT`` with
the reason no exit duty applies to it (a task entering a state, not leaving one; a repair). A new
script that moves tasks therefore fails here until someone decides what its tasks owe. Nothing runs:
the scripts are read as text (their behaviour is tested on Redis elsewhere: tests/test_transitions.py,
test_seams.py, test_workflows.py, test_keyed.py, ...)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from asynqpy.core.spine import stored

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua"
INCLUDES = LUA / "includes"

NO_EXIT = {
    # a task enters a state: nothing to release, tell or clear yet
    "enqueue": "stores a new task (includes/newtask store_new)",
    "enqueue_keyed": "stores a new task, pending or blocked behind its key (includes/serial key_admit)",
    "enqueue_keyed_many": "stores new tasks, each pending or blocked behind its key (includes/serial key_admit)",
    "enqueue_many": "stores new tasks",
    "enqueue_target": "stores a new targeted task",
    "group_add": "stores a new task in an aggregation group",
    "cron_fire": "stores the new task of a cron entry's firing",
    "proc_start": "stores a process's first input; its timer replaced (process proc_cancel_timer) had not started",
    "dequeue": "pending -> active: a worker takes the task (its lease starts): it leaves nothing behind",
    "forward": "scheduled / retry -> pending (a keyed one only if its key is free: includes/serial key_take): the "
               "task stays live with its lock, key, children",
    "key_gate": "scheduled -> pending or blocked: a due keyed task whose key is held takes its key's turn "
                "(includes/serial key_place)",
    "resolve": "waiting -> pending / scheduled: a child whose parents all ended is released (includes/release)",
    "run_tasks": "an operator runs a task now (scheduled / retry / archived -> pending): it stays or becomes live; "
                 "an archived task's ends were told when it was archived (told again changes nothing)",
    "edit_task": "rewrites a live task's message in its state (or moves it between pending and scheduled): it stays "
                 "live",
    "set_workers": "rewrites a targeted task's message in its state",
    "rewrap": "key rotation: the same message, its encrypted values sealed again, in the same state (never active)",
    "hold": "unblock: held tasks (scheduled, includes/hold) -> pending: they stay live with their lock, key, children",
    # repairs and sweeps of tasks whose duties were done when they ended
    "expire": "completed tasks past their retention: every duty was done when they completed",
    "trim": "archived tasks past the archive's limits (includes/trim): every duty was done when they were archived",
    "key_free": "the janitor frees a key whose holder is gone (includes/serial key_release): the holder's exit was "
                "skipped by hand, the next task is admitted",
    "reconcile": "archives a stored value with an unknown state byte as it is: not a task (nothing to release)",
}
"""Scripts that change tasks without ``task_exit``, and why no exit duty applies."""

SHAPES = {"done", "complete", "archive", "cancel", "delete_tasks", "archive_tasks", "schedule", "proc_commit",
          "fail_waiting", "aggregate", "ungroup", "run_end", "retry", "snooze", "requeue", "extend"}
"""Scripts known to leave through the exit include (the check below must find them)."""


@cache
def _scripts() -> dict[str, str]:
    """Each script's text, with the includes that are parts of its body put in place (as the loader
    flattens them): those whose code reads the script's inputs (``K.x``: the dequeue's stages)."""
    return {p.stem: _with_body_parts(p.read_text()) for p in sorted(LUA.glob("*.lua"))}


def _with_body_parts(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        part = (INCLUDES / f"{m.group(1)}.lua").read_text()
        return _with_body_parts(part) if re.search(r"(?<![\w.])K\.\w", _code(part)) else m.group(0)

    return re.sub(r'^--- @include "(\w+)"[ \t]*$', sub, text, flags=re.MULTILINE)


@cache
def _includes() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(INCLUDES.glob("*.lua"))}


def _body(text: str) -> str:
    """A script without its header (the header names keys in words, not calls)."""
    return text.split("]]", 1)[1] if text.startswith("--[[") else text


def _tasks_key(text: str) -> str | None:
    """The name the script's header gives the tasks hash (its body reads it as ``K.<name>``)."""
    m = re.search(r"^KEY (t|tasks)\b", text, re.MULTILINE)
    return m.group(1) if m else None


def _code(text: str) -> str:
    """Lua text without its comments."""
    return "\n".join(re.sub(r"\s--(?!\]).*$", "", line) for line in text.splitlines()
                     if not line.lstrip().startswith("--"))


def _functions(text: str) -> dict[str, str]:
    """An include's top-level functions: name -> code (up to the next top-level definition)."""
    parts = re.split(r"^(?=local function )", _code(text), flags=re.MULTILINE)
    out = {}
    for part in parts:
        m = re.match(r"local function (\w+)\(", part)
        if m:
            out[m.group(1)] = part
    return out


@cache
def _task_writers() -> frozenset[str]:
    """Include functions that write or delete a field of the tasks hash (its parameter is named ``t``
    or ``tkey``), directly or through another such function."""
    funcs = {name: text for inc in _includes().values() for name, text in _functions(inc).items()}
    writers = {name for name, text in funcs.items()
               if re.search(r"'H(?:SET|DEL)',\s*(?:t|tkey),", text)}
    grown = True
    while grown:
        grown = False
        for name, text in funcs.items():
            if name not in writers and any(re.search(rf"\b{w}\(", text) for w in writers):
                writers.add(name)
                grown = True
    return frozenset(writers)


def _changes_tasks(text: str) -> bool:
    body = _code(_body(text))
    n = _tasks_key(text)
    if n is not None and re.search(rf"'H(?:SET|DEL)',\s*K\.{n}\b", body):
        return True
    return any(re.search(rf"\b{w}\(", body) for w in _task_writers() if w != "task_exit")


def _calls_exit(text: str) -> bool:
    return '--- @include "exit"' in text and "task_exit(" in _body(text)


def test_the_check_sees_the_writes() -> None:
    changing = {name for name, text in _scripts().items() if _changes_tasks(text)}
    assert SHAPES | set(NO_EXIT) <= changing, f"not seen as changing tasks: {(SHAPES | set(NO_EXIT)) - changing}"
    assert {"key_release", "store_new", "trim_archive", "release"} <= _task_writers()
    assert not _changes_tasks(_scripts()["stats"]) and not _changes_tasks(_scripts()["watch"])


def test_every_script_that_changes_a_task_calls_the_exit_include_or_says_why() -> None:
    changing = {name for name, text in _scripts().items() if _changes_tasks(text)}
    for name in sorted(changing):
        uses_exit = _calls_exit(_scripts()[name])
        assert uses_exit or name in NO_EXIT, (
            f"lua/{name}.lua changes tasks without lua/includes/exit.lua: call task_exit with the way its tasks "
            "leave (a row of exit_row), or list it in NO_EXIT with the reason no duty applies")
        assert not (uses_exit and name in NO_EXIT), f"{name} calls task_exit: take it out of NO_EXIT"
    assert not set(NO_EXIT) - changing, f"NO_EXIT lists scripts that no longer change tasks: {set(NO_EXIT) - changing}"
    assert SHAPES <= {name for name in changing if _calls_exit(_scripts()[name])}


def _exits_table() -> set[str]:
    """The ways of leaving exit.lua knows: the rows of its table of duties (exit_row)."""
    text = _includes()["exit"]
    table = text.split("local function exit_row(how)", 1)[1].split("\nend\n", 1)[0]
    return set(re.findall(r"\bhow == '(\w+)' then\s+return ", table))


def test_every_way_of_leaving_named_is_a_row_of_the_table() -> None:
    rows = _exits_table()
    assert {"done", "completed", "archived", "deleted", "retry"} <= rows
    used: set[str] = set()
    for name, text in _scripts().items():
        for expr in re.findall(r"\bhow\s*=\s*([^\n,}]+)", _body(text)):
            hows = set(re.findall(r"'(\w+)'", expr))
            assert hows, f"{name}: task_exit's how is not a literal: {expr.strip()}"
            used |= hows
            assert hows <= rows, f"{name}: no row of exit_row (includes/exit.lua) for {hows - rows}"
    assert used == rows, f"rows of exit_row that no script uses: {rows - used}"


_SLICE = re.compile(r"string\.sub\(\s*[^,()]+(?:\([^()]*\))?\s*,\s*(?:1\s*,\s*1|1\s*,\s*\d+|2|2\s*,\s*\d+|10)\s*\)"
                    r"|:sub\(")


def test_no_script_slices_a_stored_value_but_the_stored_include() -> None:
    for path in [*sorted(LUA.glob("*.lua")), *sorted(INCLUDES.glob("*.lua"))]:
        if path.name == "stored.lua":
            continue
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("--"):
                continue
            assert not _SLICE.search(line), (
                f"{path.relative_to(ROOT)} slices a stored value by hand: use includes/stored.lua "
                f"(stored_state, stored_msg, stored_token, stored_holds): {line.strip()}")
    assert _SLICE.search("if string.sub(v, 1, 1) ~= 'a' then") and _SLICE.search("m = string.sub(v, 10)")


def test_the_stored_include_and_core_stored_agree_on_the_layout() -> None:
    text = _includes()["stored"]
    m = re.search(r"^local TOKEN_LEN = (\d+)$", text, re.MULTILINE)
    assert m and int(m.group(1)) == stored.TOKEN_LEN
    assert stored.ACTIVE == b"a" and "== 'a'" in text


def test_the_architecture_lists_every_exit_path() -> None:
    doc = (ROOT / "docs" / "internals-scripts.md").read_text()
    table = doc.split("### Exit paths", 1)[1].split("\n### ", 1)[0]
    files = {p.name[:-4] for p in LUA.glob("*.lua")}
    for name, text in _scripts().items():
        n = _tasks_key(text)
        ends = n is not None and bool(re.search(rf"'HDEL',\s*K\.{n}\b", _body(text))
                                      or re.search(rf"'HSET',\s*K\.{n},[^\n]*'[xc]' \.\.", _body(text)))
        if ends and name not in ("extend", "reconcile"):
            full = f"{name}.lua"
            assert name in files and f"`{full}`" in table, f"docs/internals-scripts.md 'Exit paths' does not name {full}"


_LUA_GLOBALS = {"redis", "tonumber", "tostring", "unpack", "ipairs", "pairs", "error", "type", "math", "string",
                "table", "select", "next", "pcall", "assert", "cjson", "cmsgpack", "struct", "bit", "rawget"}
_LUA_WORDS = {"if", "then", "else", "elseif", "end", "function", "local", "return", "and", "or", "not", "while", "do",
              "for", "in", "repeat", "until", "nil", "true", "false", "break"}


def _undefined(source: str) -> set[str]:
    """The functions (and includes/process's R_ indexes) a flattened script uses without defining."""
    code = re.sub(r"'[^'\n]*'", "''", _code(source))
    defined = set(re.findall(r"local function (\w+)", code))
    for m in re.finditer(r"local ([\w, ]+?)\s*=", code):
        defined |= {n.strip() for n in m.group(1).split(",")}
    defined |= set(re.findall(r"local (\w+)\s*$", code, re.MULTILINE))
    for m in re.finditer(r"function \w*\(([^)]*)\)", code):
        defined |= {n.strip() for n in m.group(1).split(",") if n.strip()}
    used = set(re.findall(r"(?<![\w.:])([A-Za-z_]\w*)\s*\(", code)) | set(re.findall(r"(?<![\w.:])(R_[A-Z]+)\b", code))
    return used - defined - _LUA_GLOBALS - _LUA_WORDS


def test_every_function_a_script_calls_comes_with_its_includes() -> None:
    """A script reaches the shared functions through its includes (exit.lua brings events, unique, flow,
    serial and slots; not process): one it uses but does not include would be a global, nil in Redis,
    an error only on the path that calls it."""
    from asynqpy.core.spine.scripts import _flatten

    for path in sorted(LUA.glob("*.lua")):
        missing = _undefined(_body(_flatten(path.read_text(), INCLUDES, set())))
        assert not missing, f"{path.name} uses {sorted(missing)} without the include that defines it"
    assert _undefined("local a = 1\nreturn proc_first(a) + R_N") == {"proc_first", "R_N"}
